"""faforge: flash-attn conda packages that match their PyTorch build exactly."""

__version__ = "0.1.0"
