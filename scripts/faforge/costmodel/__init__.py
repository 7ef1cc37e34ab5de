"""The product's build-cost model, below the plan that uses it and the families that add to it.

`samples` reads and writes the measured compile costs (variants/build-measurements.yaml), keeping a family's
own sections as read for the family to check; `extrapolate` fits them to per-TU, per-cell and per-runner
costs. faforge.costmodel.runners turns costs into CI jobs (variants/build-cost.yaml); a family's plan module
(faforge.families.<name>.plan) uses both for its own packages. The studies that measure (faforge bench-build)
live above, in faforge.buildcost.
"""
