"""Doctor's layout-break rule: the ABI gate's finding from the shared table (faforge/abi/layout_breaks.json),
reported only when the import did not succeed (tests/abi/test_layout.py covers the verdicts themselves)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from faforge.abi.check import check_path
from faforge.doctor.rules_extension import layout_break
from faforge.doctor.situation import ERROR, WARNING
from faforge.doctor.torch_symbols import dating
from faforge.doctor.torch_symbols_file import default_table
from tests.abi import layout_fixtures


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to build the stand-ins")
    return layout_fixtures.build(cxx, tmp_path_factory.mktemp("layout"))


def _situation(module, import_failed=True):
    return SimpleNamespace(
        binary=SimpleNamespace(module=module),
        import_failed=import_failed,
        torch_words="torch 2.9.1",
        gate_problems=lambda *kinds: [p for p in module.problems if p.kind in kinds] if import_failed else [],
    )


def test_doctor_names_the_break_when_the_import_failed(built):
    broken = check_path(built["old"], [built["torch_after"]]).modules[0]
    found = layout_break(_situation(broken))
    assert found.kind == "layout-break" and found.severity == ERROR and "torch::Library::_impl" in found.message
    assert layout_break(_situation(broken, import_failed=False)) is None  # the import is the ground truth
    untold = check_path(built["hidden"], [built["torch_after"]]).modules[0]
    maybe = layout_break(_situation(untold))
    assert maybe.severity == WARNING and maybe.details == untold.untold
    fine = check_path(built["new"], [built["torch_after"]], dating=dating(default_table())).modules[0]
    assert layout_break(_situation(fine)) is None
