"""What a flash-attn build costs, and how much of it a compiler cache saves.

`tus` names the kernel TUs, `samples` reads and writes the measured costs
(variants/build-measurements.yaml), `extrapolate` turns them into per-cell estimates,
`layout` lays out rattler-build-like build trees, `measure` times real nvcc compiles in them,
`cachekey` names CI caches, and `bench` (`python -m faforge.buildcost.bench`) ties them together.
"""
