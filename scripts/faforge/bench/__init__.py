"""The build-cost bench: what `faforge bench-build` measures and reports beyond the product's cost model
(faforge.buildcost), and the studies run by hand. Nothing of plan, build, verify or publish imports it.

`build_cost` (`python -m faforge.bench.build_cost`, the same as `faforge bench-build`) times a TU subset in two
rattler-build-like trees, through `cache_reuse` (does a compiler cache filled by one python serve the
next?). `kernel_split` compares the matrix before and after the kernel split; `pip_world_cost` is what a
torch release costs the pip world; `torch_preprocess_diff` and `kernel_objects_across_torch` compare what
nvcc sees and emits for one kernel TU across torch minors.
"""
