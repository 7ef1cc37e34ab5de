"""FlashAttention-3's GPU test suite: what the installed flash-attn-3 declares, checked on the GPU.

Modelled on upstream's hopper/test_flash_attn.py at the commit variants/matrix.yaml pins (0251105a:
https://github.com/Dao-AILab/flash-attention/blob/0251105a2fb19d2957484b7f023cd8c115286ced/hopper/test_flash_attn.py):
its API calls (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache), its reference
(attention in fp32, and in the input precision as the yardstick) and its tolerances (L255-L256,
L343-L348, L1048-L1049). Each test runs only where the package's flash_attn_config.py says the
binary contains the feature, so a trimmed build is tested for exactly what it holds; a declared
feature that is missing fails. Run by `faforge test-gpu --family flash-attn-3`; same layout as
faforge.gpu.suite (every module starts with `pytestmark = gate_marks()`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faforge.families.flash_attn_3.gpu_gate import evaluate
from faforge.family import FLASH_ATTN_3

if TYPE_CHECKING:
    import pytest


def gate_marks() -> list:
    import pytest  # noqa: PLC0415 (test-gpu reads the gate before pytest)

    gate = evaluate()
    return [pytest.mark.gpu, pytest.mark.skipif(not gate.usable, reason=gate.reason)]


def needs(*features: str) -> pytest.MarkDecorator:
    """A test's mark: skip unless the package declares every feature (a disabled one is not in the binary)."""
    import pytest  # noqa: PLC0415 (test-gpu reads the gate before pytest)

    missing = [f for f in features if not evaluate().enabled(f)]
    return pytest.mark.skipif(
        bool(missing), reason=f"the package was built without {', '.join(missing)} ({FLASH_ATTN_3.config_module}.py)"
    )
