"""What a flash-attn build costs, and how much of it a compiler cache saves.

`samples` reads and writes the measured costs (variants/build-measurements.yaml), `extrapolate` turns them
into per-cell estimates (`extrapolate_report` lays them out), `layout` lays out rattler-build-like build
trees and `measure` times real nvcc compiles in them (faforge.bench.build_cost, `faforge bench-build`, runs
them; the studies live in faforge.bench). `fa3` estimates FlashAttention-3's
packages from their timed TUs, `fa3_packages` splits each into CI piece jobs with faforge.release.cost's
splitter and `fa3_report` shows them. What the kernel library is (its TUs, tags, shim and layout facts)
lives in faforge.kernels, which this package may import and never the other way.
"""
