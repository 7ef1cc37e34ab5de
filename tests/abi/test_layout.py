"""The silent layout-break table (faforge/abi/layout_breaks.json) and its verdicts, on g++ stand-ins
(tests/abi/layout_fixtures.py); tests/abi/test_layout_breaks.py measures the real binaries."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from faforge.abi import classify, gate, layout
from faforge.abi.check import check_path
from faforge.abi.report import CANNOT_TELL, OK, PROBLEMS
from faforge.doctor.torch_symbols import dating
from faforge.doctor.torch_symbols_file import default_table
from faforge.errors import DataError
from tests.abi import layout_fixtures
from tests.abi.conftest import run_faforge, validate

# (extension, torch side) -> the verdict: a plain OK only where binary and torch are shown to be on one side.
EXPECTED = {
    ("old", "before"): OK,
    ("old", "after"): PROBLEMS,
    ("new", "before"): PROBLEMS,
    ("new", "after"): OK,
    ("marked", "before"): CANNOT_TELL,
    ("marked", "after"): CANNOT_TELL,
    ("hidden", "before"): CANNOT_TELL,
    ("hidden", "after"): CANNOT_TELL,
    ("plain", "before"): OK,
    ("plain", "after"): OK,
}
DATING = dating(default_table())  # what check-abi and doctor pass: the torch range the imports date a binary to


@pytest.fixture(scope="module")
def built(tmp_path_factory, gxx) -> dict[str, Path]:
    return layout_fixtures.build(gxx.cxx, tmp_path_factory.mktemp("layout"))


def test_the_table_loads_and_is_in_its_canonical_form():
    table = layout.load_table()
    assert layout.TABLE.read_text(encoding="utf-8") == layout.dump_table(table)
    (cpp,) = table.breaks
    assert cpp.boundary == "2.9.0" and "pytorch/pytorch#160657" in cpp.sources
    assert "_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE" in cpp.uses


@pytest.mark.parametrize(
    "change, key",
    [
        (lambda t: t.update(schema=2), "schema"),
        (lambda t: t.update(breaks=[]), "breaks"),
        (lambda t: t.update(about="one string"), "about"),
        (lambda t: t["breaks"][0].pop("sources"), "breaks[0]"),
        (lambda t: t["breaks"][0].update(extra=1), "breaks[0]"),
        (lambda t: t["breaks"][0].update(boundary="2.9"), "breaks[0].boundary"),
        (lambda t: t["breaks"][0].update(verdict=""), "breaks[0].verdict"),
        (lambda t: t["breaks"][0].update(uses=["torch::Library::_impl"]), "breaks[0].uses"),
        (lambda t: t["breaks"][0].update(built_from=[]), "breaks[0].built_from"),
        (lambda t: t["breaks"][0].update(sources=[None]), "breaks[0].sources"),
    ],
)
def test_a_malformed_table_names_the_file_and_key(tmp_path, change, key):
    raw = json.loads(layout.TABLE.read_text())
    change(raw)
    bad = tmp_path / "layout_breaks.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(DataError) as caught:
        layout.load_table(bad)
    assert caught.value.key == key and str(bad) in str(caught.value)


@pytest.mark.parametrize("text", ["", "{", "[1]", "\xff"])
def test_a_table_that_is_not_json_is_a_data_error(tmp_path, text):
    bad = tmp_path / "layout_breaks.json"
    bad.write_bytes(text.encode("latin-1"))
    with pytest.raises(DataError):
        layout.load_table(bad)


@pytest.mark.parametrize("case", list(EXPECTED), ids=[f"{e}-on-{t}" for e, t in EXPECTED])
def test_the_verdict_is_never_a_plain_ok_across_the_boundary(case, built):
    extension, side = case
    verdict = check_path(built[extension], [built[f"torch_{side}"]], dating=DATING)
    (module,) = verdict.modules
    assert verdict.verdict == EXPECTED[case], (module.problems, module.untold)
    layout_problems = [p for p in module.problems if p.kind == classify.LAYOUT_BREAK]
    assert len(layout_problems) == (verdict.verdict == PROBLEMS)
    if verdict.verdict == PROBLEMS:
        (problem,) = layout_problems
        assert problem.demangled.startswith("torch::Library::_impl") and problem.library == "libtorch_cpu.so"
        assert problem.imported_by == str(built[extension]) and "pytorch/pytorch#160657" in problem.detail
    if verdict.verdict == CANNOT_TELL:
        (reason,) = module.untold
        assert "does not show" in reason and module.undecided == ()


def test_without_a_dating_the_marked_side_is_untold(built):
    """The recipe's gate passes no dating (no YAML there): a dated binary's side then rests on its marks alone."""
    verdict = check_path(built["new"], [built["torch_after"]])
    assert verdict.verdict == CANNOT_TELL and "both sides may carry" in verdict.modules[0].untold[0]


@pytest.mark.parametrize(
    "extension, side, code, words",
    [
        ("old", "after", 1, "FAILED (1 problem)"),
        ("hidden", "after", 3, "CANNOT TELL (a known layout break may apply)"),
        ("marked", "before", 3, "CANNOT TELL (a known layout break may apply)"),
        ("new", "after", 0, "OK:"),
    ],
)
def test_check_abi_exits_and_says_so(built, extension, side, code, words):
    args = (built[extension], "--against", built[f"torch_{side}"])
    text = run_faforge("check-abi", *args)
    assert text.returncode == code and words in text.stdout and "Traceback" not in text.stderr
    result = run_faforge("check-abi", *args, "--json")
    report = validate(json.loads(result.stdout))
    assert result.returncode == code
    assert bool(report["modules"][0]["untold"]) == (code == 3)
    assert [p["kind"] for p in report["problems"]] == (["layout-break"] if code == 1 else [])


def test_the_recipes_gate_reads_the_same_table(built, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", [str(built["old"].parent), *sys.path])
    code = gate.main(
        [
            "--expect-cxx11-abi",
            "1",
            "--expect-archs",
            "90",
            "--module",
            "layout_old",
            "--against",
            str(built["torch_after"]),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1 and "layout-break: torch::Library::_impl" in out and "ABI gate FAILED" in out
    assert "c10::KernelFunction::~KernelFunction()" in out  # the evidence for its side


@pytest.mark.parametrize(
    "requires, side",
    [
        ("torch (==2.8.0)", PROBLEMS),
        ("torch==2.8.0", PROBLEMS),
        ("torch (==2.9.1)", OK),
        ("torch>=2.9.0", OK),
        ("torch>=2.4", CANNOT_TELL),
        ("torchvision (==2.9.1)", CANNOT_TELL),
        (None, CANNOT_TELL),
    ],
)
def test_the_distributions_torch_pin_dates_a_marked_binary(built, tmp_path, requires, side):
    """x86_64 torchvision 0.23.0 carries ~KernelFunction although built for 2.8: its `Requires-Dist: torch (==2.8.0)`
    says which side it is on. A pin of 2.8 against torch 2.9 is a FAILED, not a CANNOT TELL."""
    site = tmp_path / "site-packages"
    (site / "pkg").mkdir(parents=True)
    module = site / "pkg" / "_C.so"
    module.write_bytes(built["marked"].read_bytes())
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("pkg/_C.so,sha256=x,1\npkg-1.0.dist-info/METADATA,,\n")
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pkg\n" + (f"Requires-Dist: {requires}\n" if requires else "")
    )
    verdict = check_path(module, [built["torch_after"]], dating=DATING)
    assert verdict.verdict == side, verdict.modules[0].untold or verdict.modules[0].problems
    if side == PROBLEMS:
        assert "its distribution requires torch ==2.8.0" in verdict.modules[0].problems[0].detail
