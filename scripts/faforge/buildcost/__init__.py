"""What a flash-attn build costs, measured, and how much of it a compiler cache saves.

The model the plan uses (the measurements file and its fits) is faforge.costmodel, below the release pipeline;
this package measures and reports: `extrapolate_report` lays the model out per cell, `split` the matrix
before and after the kernel split, `layout` lays out rattler-build-like build trees, `measure` times real nvcc
compiles in them, and `bench` (`python -m faforge.buildcost.bench`) ties them together. What the kernel library
is (its TUs, tags, shim and layout facts) lives in faforge.kernels, which this package may import and never the
other way.
"""
