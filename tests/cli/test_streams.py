"""Closed, full and abandoned streams (the hostile classes): every command with --json, as a real process whose
stdout or stderr is /dev/full, closed (`>&-`) or a pipe whose reader is gone. No traceback ever; a lost
result is exit 2 (or the failure the work found); a pipe closed by its reader is not an error; a
progress line that cannot be written costs neither the work nor its result."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.cli import build_parser

CONSOLE_SCRIPT = Path(sys.executable).parent / "faforge"

# One quick run of each command with --json, and the exit status it has with usable streams.
RUNS = {
    "matrix": (["matrix", "--kernels", "--json"], 0),
    "render": (["render", "nope", "--json"], 2),
    "plan": (["plan", "--channel", "", "--json"], 2),
    "build": (
        ["build", "pypi/linux-aarch64/py311/torch2.14/cu130/abi1", "--output-dir", "/nonexistent-never-made", "--json"],
        2,
    ),
    "check-abi": (["check-abi", "no-such-module.so", "--json"], 2),
    "doctor": (["doctor", "--json"], None),  # healthy or not depends on this interpreter; the run decides
    "verify": (["verify", "no-such.conda", "--manifest", "no-such-dir", "--json"], 2),
    "publish": (["publish", "no-such.conda", "--to", "no-such-channel", "--json"], 2),
    "bump": (["bump", "--source", "nope", "--json"], 2),
    "bench-build": (["bench-build", "--cells", "nope", "--json"], 2),
    "bench-gpu": (["bench-gpu", "--dtype", "nope", "--json"], 2),
    "wheel": (
        [
            "wheel",
            "fa3",
            "no-such.whl",
            "--cuda",
            "13.0",
            "--archs",
            "90a",
            "--out",
            "/nonexistent-never-made",
            "--json",
        ],
        2,
    ),
}
FULL = "/dev/full"


def faforge(argv, *, stdout, stderr=subprocess.PIPE, shell_redirect=""):
    """Run the console script; `shell_redirect` (e.g. `>&-`) is applied by sh, which can close an fd."""
    command = ["sh", "-c", f'exec "$0" "$@" {shell_redirect}', str(CONSOLE_SCRIPT), *argv]
    return subprocess.run(command, stdout=stdout, stderr=stderr, timeout=120)


@functools.cache
def reference(name: str) -> subprocess.CompletedProcess:
    """The run with usable streams."""
    return faforge(RUNS[name][0], stdout=subprocess.PIPE)


def expected_code(name: str) -> int:
    code = RUNS[name][1]
    return reference(name).returncode if code is None else code


def no_traceback(stderr: bytes) -> str:
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text and "Exception ignored" not in text and "Error:" not in text.replace("error:", ""), (
        text
    )
    return text


def test_every_command_with_json_has_a_case():
    parser = build_parser(["--help"])
    sub = next(a for a in parser._actions if a.dest == "command")
    with_json = {name for name, p in sub.choices.items() if any("--json" in a.option_strings for a in p._actions)}
    with_json.discard("test-gpu")  # needs a GPU test suite to run; its streams are the same cli.main's
    assert with_json == set(RUNS)


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("how", ["full", "closed"])
def test_a_full_or_closed_stdout_is_a_failure_without_traceback(name, how):
    argv, _ = RUNS[name]
    code = expected_code(name)
    with open(FULL, "wb") as full:
        result = faforge(argv, stdout=full) if how == "full" else faforge(argv, stdout=None, shell_redirect=">&-")
    stderr = no_traceback(result.stderr)
    assert result.returncode == (code or 2), (result.returncode, stderr)
    if code in (0, 1):
        assert f"faforge {name}: error: could not write the result to stdout" in stderr, stderr
    assert sum(": error: " in line for line in stderr.splitlines()) == 1, stderr


@pytest.mark.parametrize("name", RUNS)
def test_a_pipe_whose_reader_left_is_no_error(name):
    argv, _ = RUNS[name]
    code = expected_code(name)
    read, write = os.pipe()
    os.close(read)  # the reader exits at once (`faforge ... | true`)
    try:
        result = faforge(argv, stdout=write)
    finally:
        os.close(write)
    no_traceback(result.stderr)
    assert result.returncode == code


@pytest.mark.parametrize("name", ["doctor", "matrix"])
@pytest.mark.parametrize("how", ["full", "closed"])
def test_a_full_or_closed_stderr_costs_neither_the_work_nor_the_result(name, how):
    argv, _ = RUNS[name]
    with open(FULL, "wb") as full:
        result = (
            faforge(argv, stdout=subprocess.PIPE, stderr=full)
            if how == "full"
            else faforge(argv, stdout=subprocess.PIPE, stderr=None, shell_redirect="2>&-")
        )
    assert result.returncode == reference(name).returncode
    report, expected = json.loads(result.stdout), json.loads(reference(name).stdout)
    if name == "doctor":  # the probe's timings differ from run to run; the diagnosis does not
        report, expected = report["problems"], expected["problems"]
    assert report == expected
