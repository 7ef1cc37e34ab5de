"""The FA3 suite's marker, its gate's verdict in pytest's header, and the FA3 TUs each test launched
(torch.profiler's kernel names, faforge.families.flash_attn_3.gpu_kernels.tu_of_kernel) for test-gpu's
coverage check."""

from __future__ import annotations

from faforge.families.flash_attn_3.gpu_gate import evaluate
from faforge.families.flash_attn_3.gpu_kernels import tu_of_kernel
from faforge.family import FLASH_ATTN_3
from faforge.gpu.suite_hooks import conftest_hooks

globals().update(
    conftest_hooks(
        evaluate,
        lambda name: tu_of_kernel(name, evaluate().tus),
        f"an installed {FLASH_ATTN_3.package}",
        "FA3 GPU gate",
    )
)
