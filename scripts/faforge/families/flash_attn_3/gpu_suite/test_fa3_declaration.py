"""The binary holds what its package declares: its GPU code and a kernel of every declared TU.
Not behind the gate's skip: a declaration the binary does not keep is a failure (exit 1)."""

from __future__ import annotations

import pytest

from faforge.families.flash_attn_3.gpu_gate import evaluate
from faforge.gpu.suite_hooks import check_declaration_kept

pytestmark = pytest.mark.gpu


def test_binary_has_what_its_package_declares():
    check_declaration_kept(evaluate)
