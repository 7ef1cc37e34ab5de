"""The suite runner's verdict: all skipped is 3 (never 0), any failure 1; junit read back from a real pytest run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED
from faforge.gpu.run_suite import format_summary, parse_junit, verdict

SAMPLE = """
import pytest

def test_ok():
    pass

def test_wrong():
    assert 1 == 2, "numbers differ"

@pytest.mark.skip(reason="no CUDA device")
def test_skipped():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("setup exploded")

def test_error(broken):
    pass
"""


def record(outcome, message=None):
    return {"id": "test_x.py::test_y", "outcome": outcome, "duration_s": 0.1, "message": message}


def test_parse_junit_of_a_real_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", str(tmp_path / "test_sample.py")],
                   cwd=tmp_path, capture_output=True, check=False)  # fmt: skip
    tests = {t["id"]: t for t in parse_junit(junit)}
    assert {i: t["outcome"] for i, t in tests.items()} == {
        "test_sample.py::test_ok": "passed",
        "test_sample.py::test_wrong": "failed",
        "test_sample.py::test_skipped": "skipped",
        "test_sample.py::test_error": "error",
    }
    assert tests["test_sample.py::test_skipped"]["message"] == "no CUDA device"
    assert "numbers differ" in tests["test_sample.py::test_wrong"]["message"]
    assert tests["test_sample.py::test_ok"]["message"] is None


@pytest.mark.parametrize(
    ("pytest_exit_code", "tests", "expected"),
    [
        (0, [record("passed"), record("skipped", "needs sm_90")], (EXIT_OK, "passed", None)),
        (0, [record("skipped", "no GPU")] * 3, (EXIT_SKIPPED, "skipped", "no GPU")),
        (1, [record("passed"), record("failed", "dq off")], (EXIT_PROBLEMS, "failed", "1 failed, 0 errors")),
        (1, [record("skipped", "no GPU"), record("error", "boom")], (EXIT_PROBLEMS, "failed", "0 failed, 1 errors")),
        (5, [], (EXIT_PROBLEMS, "failed", None)),
        (2, [record("passed")], (EXIT_PROBLEMS, "failed", None)),
    ],
    ids=["passed", "all-skipped", "failed", "error", "none-collected", "interrupted"],
)
def test_verdict(pytest_exit_code, tests, expected):
    exit_code, status, reason = verdict(pytest_exit_code, tests)
    assert (exit_code, status) == expected[:2]
    if expected[2] is not None:
        assert reason == expected[2]
    elif status == "failed":
        assert reason  # a failure always says why


def test_summary_text_names_the_reason():
    summary = {
        "counts": {"passed": 0, "failed": 0, "error": 0, "skipped": 72}, "duration_s": 2.5, "status": "skipped",
        "reason": "no CUDA device visible to torch", "gate": {"notes": []}, "report_dir": None,
    }  # fmt: skip
    assert format_summary(summary).splitlines() == [
        "faforge GPU suite: 0 passed, 0 failed, 0 errors, 72 skipped in 2.5s",
        "SKIPPED: no CUDA device visible to torch",
    ]
