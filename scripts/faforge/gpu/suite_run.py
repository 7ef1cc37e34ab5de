"""Run the GPU suite under pytest, in a child process, and judge its outcome: passed (0), failed (1), skipped (3).

pytest runs in a child process (faforge.gpu.suite_child), so a crashing kernel fails the run instead of killing
the caller, and with its own settings rather than those of whatever checkout it is started from;
faforge.gpu.junit reads its report. All tests skipped means nothing was verified: exit 3, never 0. The command
lines that call this (`faforge test-gpu`, a recipe's `python -m faforge.gpu.run_suite`) are
faforge.gpu.run_suite's.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED, FaforgeError, path_error
from faforge.families.flash_attn_3 import gpu_gate as fa3_gate
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.gpu.coverage import compare, compare_declared
from faforge.gpu.gate import evaluate
from faforge.gpu.junit import count_outcomes, parse_junit
from faforge.gpu.suite_child import missing_requirements, run_child, suite_env

SUITE_DIR = Path(__file__).resolve().parent / "suite"
FA3_SUITE_DIR = Path(fa3_gate.__file__).resolve().parent / "gpu_suite"
SCHEMA_VERSION = 1
# pytest's exit status for a command-line usage error (pytest.ExitCode.USAGE_ERROR): bad input, not a failed run.
PYTEST_USAGE_ERROR = 4
PYTEST_INI = """\
[pytest]
addopts = --strict-markers -p no:cacheprovider
xfail_strict = true
junit_family = xunit2
"""


def verdict(
    pytest_exit_code: int, tests: list[dict], stopped: str | None = None, suite_dir: Path = SUITE_DIR
) -> tuple[int, str, str | None]:
    """(exit code, status, reason) from what pytest reported; `stopped` says why the run was cut short."""
    counts = count_outcomes(tests)
    if stopped:
        return (
            EXIT_PROBLEMS,
            "failed",
            f"{stopped} after {counts['passed']} passed, {counts['failed']} failed, {counts['error']} errors",
        )
    if counts["failed"] or counts["error"]:
        return EXIT_PROBLEMS, "failed", f"{counts['failed']} failed, {counts['error']} errors"
    if pytest_exit_code not in (0, 5):  # interrupted, internal error, usage error: nothing trustworthy ran
        return EXIT_PROBLEMS, "failed", f"pytest exited {pytest_exit_code} without a failing test (see its output)"
    if not tests:
        return EXIT_PROBLEMS, "failed", f"pytest collected no tests from {suite_dir}"
    if counts["passed"] == 0:
        return EXIT_SKIPPED, "skipped", "; ".join(sorted({t["message"] or "no reason given" for t in tests}))
    return EXIT_OK, "passed", None


def run(
    report_dir: Path | None = None,
    pytest_args: tuple[str, ...] = (),
    output: TextIO = sys.stdout,
    time_cap_s: float | None = None,
    suite_dir: Path | None = None,
    family: str = FLASH_ATTN.package,
) -> dict:
    """Run the suite (its output goes to `output`) and return the versioned summary; see tests/schemas/test-gpu.json.

    A time cap, or SIGTERM (e.g. from `timeout`), interrupts pytest like Ctrl-C, so it still writes junit.xml
    and the report files hold every test that ran; the verdict is then "failed" with the reason."""
    missing = missing_requirements()
    if missing:
        raise FaforgeError(
            f"the GPU suite needs {', '.join(missing)}, which this Python ({sys.executable}) cannot import",
            hint=f"{sys.executable} -m pip install {' '.join(repr(m) if '>' in m else m for m in missing)}",
        )
    fa3 = family == FLASH_ATTN_3.package
    gate = fa3_gate.evaluate() if fa3 else evaluate()
    suite_dir = suite_dir or (FA3_SUITE_DIR if fa3 else SUITE_DIR)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="faforge-gpu-") as scratch:
        work = Path(report_dir) if report_dir else Path(scratch)
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # faforge.paths.output_dir's check; that module is not among RECIPE_TEST_FILES
            raise path_error(exc, "--report-dir", work) from None
        ini, junit, kernels = Path(scratch) / "pytest.ini", work / "junit.xml", work / "kernels.json"
        ini.write_text(PYTEST_INI)
        command = [sys.executable, "-u", "-m", "pytest", str(suite_dir), "-c", str(ini), "--rootdir", str(suite_dir)]
        command += ["-rfEs", f"--junitxml={junit}", *pytest_args]
        print("+ " + " ".join(command), file=output, flush=True)
        with open(work / "pytest.log", "w") if report_dir else open(os.devnull, "w") as log:
            pytest_exit_code, stopped = run_child(command, suite_env(kernels), output, log, time_cap_s)
        output.flush()
        tests = parse_junit(junit) if junit.exists() else []
        observed = json.loads(kernels.read_text()) if kernels.exists() else None
        coverage = (
            None
            if observed is None
            else compare_declared(observed, gate.tus)
            if isinstance(gate, fa3_gate.Fa3Gate)
            else compare(observed, gate.head_dims)
        )
    if pytest_exit_code == PYTEST_USAGE_ERROR and not tests and not stopped:
        raise FaforgeError(
            "pytest rejected the arguments after `--` (its message is above)",
            input=" ".join(pytest_args),
            hint="see `python -m pytest --help`",
        )
    exit_code, status, reason = verdict(pytest_exit_code, tests, stopped, suite_dir)
    if fa3 and coverage and coverage["never_seen"] and exit_code == EXIT_OK:
        exit_code, status, reason = (
            EXIT_PROBLEMS,
            "failed",
            f"declared TUs never launched: {', '.join(coverage['never_seen'])}",
        )
    summary = {
        "family": family,
        "version": SCHEMA_VERSION,
        "status": status,
        "exit_code": exit_code,
        "reason": reason,
        "gate": gate.to_json(),
        "counts": count_outcomes(tests),
        "duration_s": round(time.monotonic() - started, 2),
        "pytest_exit_code": pytest_exit_code,
        "report_dir": str(report_dir) if report_dir else None,
        "tests": tests,
        "kernel_coverage": coverage,
    }
    if report_dir:
        (Path(report_dir) / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
