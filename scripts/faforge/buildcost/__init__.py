"""What a flash-attn build costs, measured, and laid out per cell.

The model the plan uses (the measurements file and its fits) is faforge.costmodel, below the release pipeline;
this package lays it out and measures: `extrapolate_report` lays the model out per cell, `layout` lays out
rattler-build-like build trees and `measure` times real nvcc compiles in them (faforge.bench.build_cost,
`faforge bench-build`, runs them; the studies live in faforge.bench). What the kernel library is (its TUs,
tags, shim and layout facts) lives in faforge.kernels, which this package may import and never the other way.
"""
