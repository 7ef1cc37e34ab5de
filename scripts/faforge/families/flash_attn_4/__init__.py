"""FlashAttention-4 (PyPI flash-attn-4), the pure-Python family: its stages import what they need themselves."""
