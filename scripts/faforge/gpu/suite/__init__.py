"""flash-attn's GPU test suite: numerics of every kernel family against faforge.gpu.reference.

Shipped inside the faforge package so that the same files run three ways:
`pytest -m gpu` in the repository (tests/gpu/test_flash_attn_suite.py collects
them), `faforge test-gpu`, and `python -m faforge.gpu.run_suite` in a conda
test environment that has only torch, pytest, einops and flash_attn.

Every module starts with `pytestmark = gate_marks()`: the GPU gate
(faforge.gpu.gate) runs at collection, before any test, and when it is closed
every test is skipped with its reason.
"""

from __future__ import annotations

from faforge.gpu.gate import evaluate


def gate_marks() -> list:
    import pytest  # noqa: PLC0415 (test-gpu reads cases.py before pytest)

    gate = evaluate()
    return [pytest.mark.gpu, pytest.mark.skipif(not gate.usable, reason=gate.reason)]
