"""The suite runner's verdict: all skipped is 3 (never 0), any failure 1; junit read back from a real pytest run."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time

import pytest

from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED
from faforge.gpu.junit import parse_junit
from faforge.gpu.run_suite import format_summary
from faforge.gpu.suite_run import run, verdict

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
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                    str(tmp_path / "test_sample.py")], cwd=tmp_path, capture_output=True, check=False)  # fmt: skip
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
        "reason": "no CUDA device visible to torch", "gate": {"defects": [], "notes": []}, "report_dir": None,
    }  # fmt: skip
    assert format_summary(summary).splitlines() == [
        "faforge GPU suite: 0 passed, 0 failed, 0 errors, 72 skipped in 2.5s",
        "SKIPPED: no CUDA device visible to torch",
    ]


SLOW_SUITE = """
import time

def test_quick():
    pass

def test_slow():
    time.sleep(60)
"""


def slow_suite(folder):
    folder.mkdir()
    (folder / "test_slow_suite.py").write_text(SLOW_SUITE)
    return folder


def test_a_time_cap_stops_the_run_and_still_writes_the_reports(tmp_path):
    report = tmp_path / "report"
    summary = run(report, output=io.StringIO(), time_cap_s=4, suite_dir=slow_suite(tmp_path / "suite"))
    assert summary["duration_s"] < 40
    assert (summary["exit_code"], summary["status"]) == (EXIT_PROBLEMS, "failed")
    assert summary["reason"].startswith("stopped by the 4 s time cap after 1 passed")
    assert json.loads((report / "summary.json").read_text()) == summary
    assert [t["id"] for t in parse_junit(report / "junit.xml")] == ["test_slow_suite.py::test_quick"]
    assert "test_slow_suite.py" in (report / "pytest.log").read_text()


def test_sigterm_stops_the_run_and_still_writes_the_reports(tmp_path):
    """What `timeout` sends: the same as the time cap, so a capped GPU call leaves its reports."""
    report = tmp_path / "report"
    code = (
        f"from pathlib import Path; from faforge.gpu.suite_run import run; "
        f"run(Path({str(report)!r}), suite_dir=Path({str(slow_suite(tmp_path / 'suite'))!r}))"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in child.stdout:  # wait until pytest has collected, then give test_quick time to pass
        if "collected 2 items" in line:
            break
    time.sleep(3)
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=40)
    summary = json.loads((report / "summary.json").read_text())
    assert summary["reason"].startswith("stopped by SIGTERM after 1 passed")


BROKEN_PLUGIN_DIST = {
    "broken_plugin.py": "raise ImportError('this plugin breaks on import')\n",
    "broken_plugin-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n",
    "broken_plugin-1.0.dist-info/entry_points.txt": "[pytest11]\nbroken = broken_plugin\n",
}


def test_the_child_pytest_does_not_autoload_installed_plugins(tmp_path, monkeypatch):
    """A pytest plugin installed on the GPU machine that fails to import must not end the run before a test."""
    site = tmp_path / "site"
    for name, text in BROKEN_PLUGIN_DIST.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text("def test_one():\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    plain = subprocess.run([sys.executable, "-m", "pytest", str(suite)], capture_output=True, text=True, cwd=tmp_path)
    assert plain.returncode != 0 and "this plugin breaks on import" in plain.stdout + plain.stderr  # the hazard is real
    summary = run(None, output=io.StringIO(), suite_dir=suite)
    assert summary["status"] == "passed" and summary["counts"]["passed"] == 1


def test_a_missing_pytest_is_exit_2_with_the_install_command():
    code = "import sys; sys.modules['pytest'] = None; from faforge.gpu.run_suite import main; sys.exit(main([]))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert "needs pytest>=8" in result.stderr and "-m pip install 'pytest>=8'" in result.stderr
    assert "Traceback" not in result.stderr
