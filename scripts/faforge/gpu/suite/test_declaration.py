"""The binary holds what its package declares: the declared head dims and code for a declared GPU arch.

Not behind the gate's skip: a binary without code for a GPU its package covers closes the gate, and
that is a failure here (exit 1), not "nothing verified" (exit 3).
"""

from __future__ import annotations

import pytest

from faforge.gpu.gate import evaluate
from faforge.gpu.suite_hooks import check_declaration_kept

pytestmark = pytest.mark.gpu


def test_binary_has_what_its_package_declares():
    check_declaration_kept(evaluate)
