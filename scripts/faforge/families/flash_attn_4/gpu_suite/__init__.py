"""FlashAttention-4's GPU test suite: `flash_attn.cute.flash_attn_func` forward and backward against PyTorch's
SDPA (math backend: in fp32 for the answer, in the input precision for the yardstick, upstream's error rule as
faforge.gpu.reference states it), causal and not, head dims 64 and 128, bf16 and fp16, on the archs FA4 runs
(faforge.families.flash_attn_4.gpu_gate). Each kernel's first call, which the CuTe DSL spends compiling, is timed
apart and written to first_calls.json beside test-gpu's reports. Run by `faforge test-gpu --family flash-attn-4`;
same layout as faforge.gpu.suite (every module starts with `pytestmark = gate_marks()`).
"""

from __future__ import annotations

from faforge.families.flash_attn_4.gpu_gate import evaluate


def gate_marks() -> list:
    import pytest  # noqa: PLC0415 (test-gpu reads the gate before pytest)

    gate = evaluate()
    return [pytest.mark.gpu, pytest.mark.skipif(not gate.usable, reason=gate.reason)]
