"""Registers the suite's marker, prints the GPU gate's verdict in pytest's header, and records which
flash-attn kernel TUs each test launched (torch.profiler's kernel names, faforge.gpu.dispatch.tu_of_kernel)
into the JSON file named by FAFORGE_GPU_KERNELS_JSON, for faforge.gpu.coverage to compare with the emulation."""

from __future__ import annotations

from faforge.family import FLASH_ATTN
from faforge.gpu.dispatch import tu_of_kernel
from faforge.gpu.gate import evaluate
from faforge.gpu.suite_hooks import conftest_hooks

globals().update(conftest_hooks(evaluate, tu_of_kernel, f"a built {FLASH_ATTN.package}", "GPU gate"))
