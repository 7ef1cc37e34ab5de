"""`faforge bench-build` and `python -m faforge.bench.build_cost` as a user runs them (report mode)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from faforge.matrix import load_matrix

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "bench-build.json"


def run(*args):
    return subprocess.run(
        [sys.executable, "-m", "faforge", "bench-build", *args], capture_output=True, text=True, timeout=120
    )


def test_report_json_matches_schema_and_covers_every_matrix_arch_list():
    result = run("--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert {c["cuda_archs"] for c in report["cells"]} == {r.value for r in load_matrix().policy.cuda_archs}
    assert report["reuse"], "the committed measurements carry a cross-python reuse run"
    split = report["kernel_split"]
    assert split["kernel_builds"] == {"before": 38, "after": 12}
    assert split["new_torch_minor"]["kernel_builds"]["after"] == 0


def test_report_tables_and_the_module_entry_agree():
    table = run("--runner", "2:22")
    assert table.returncode == 0, table.stderr
    for title in (
        "Per TU class",
        "Kernels of one cell",
        "MAX_JOBS",
        "Cross-python reuse",
        "before / after the kernel split",
    ):
        assert title in table.stdout
    module = subprocess.run(
        [sys.executable, "-m", "faforge.bench.build_cost", "--runner", "2:22"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert module.stdout == table.stdout


def test_bad_input_is_a_usage_error_without_traceback(tmp_path):
    bad = run("--runner", "two:24")
    assert bad.returncode == 2 and "CPUS:GB" in bad.stderr and "Traceback" not in bad.stderr
    missing = run("--data", str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "none.yaml" in missing.stderr and "Traceback" not in missing.stderr
    measure = run("--measure")
    assert measure.returncode == 2 and "--sdist" in measure.stderr
