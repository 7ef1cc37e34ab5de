"""The kernel library: flash-attn's CUDA kernels built once, torch-free, and shared by every torch's glue.

One home for what the library is, apart from what it costs (faforge.buildcost):
  torch_shim/    its sources besides the sdist's: the shim headers, the C interface (api/), the error
                 handlers and the version script exports.map
  tus            its translation units and their classes
  cachekey       the tags that name a build: the arch list of a kernel package, the pre-split cache key
  kernel_abi     which torch minors may link it: the Philox layout rows of variants/kernel-abi.yaml
  params_layout  the measurement behind those rows (a compiled probe's sizes and offsets)
  torchfree      the check that the built library touches no torch (`python -m faforge.kernels.torchfree`)
The recipe ships this __init__, tus and torchfree into its test environments (standard library and
pyelftools only), so this file imports the standard library alone.
"""

from pathlib import Path

# The shim's folder, for tools that compile against it here (the recipe copies it beside its build script).
TORCH_SHIM = Path(__file__).resolve().parent / "torch_shim"
