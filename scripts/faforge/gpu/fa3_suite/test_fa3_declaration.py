"""The binary holds what its package declares: its GPU code and a kernel of every declared TU.
Not behind the gate's skip: a declaration the binary does not keep is a failure (exit 1)."""

from __future__ import annotations

import pytest

from faforge.gpu.fa3_gate import evaluate

pytestmark = pytest.mark.gpu


def test_binary_has_what_its_package_declares():
    gate = evaluate()
    if gate.extension is None:
        pytest.skip(gate.reason)
    assert not gate.defects, "; ".join(gate.defects)
