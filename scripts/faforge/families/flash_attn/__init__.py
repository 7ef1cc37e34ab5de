"""flash-attn 2: a torch-free kernel library per platform, CUDA, arch list and Philox layout, plus a thin glue
per cell (python, torch, CUDA, C++ ABI) and its pip wheels. Its protocol implementation is `module`; nothing
is imported here (see the package above)."""
