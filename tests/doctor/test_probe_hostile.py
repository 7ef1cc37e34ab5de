"""doctor against interpreters that attack the probe's reader: output without end, marked lines the probe
would not print, and processes that leave the probe's session (`setsid`) to outlive it.

Memory is measured on the doctor process itself (os.wait4's maximum RSS) under an address-space limit
that an unbounded reader runs into; leftover processes by their pid (`running`, from test_probe_limits).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faforge import cli
from faforge.doctor.probe_run import OUTPUT_CAP
from tests.cli.hostile_class_places import PROBE_ENV, PROBE_MARK
from tests.doctor import envs
from tests.doctor.test_probe_limits import pids_from, running

# The doctor child may map this much at most: a reader that keeps what it reads fails (MemoryError) long
# before a flood without end stops; the Python runtime and faforge's imports need far less.
ADDRESS_SPACE = 1 << 30
MAX_RSS = 200 << 20  # doctor's own peak: 30 MiB measured on a healthy venv
PR_GET_CHILD_SUBREAPER = 37


def interpreter(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


# Run from a fresh, small Python: a process forked from pytest starts with pytest's resident set, and Linux
# carries that high-water mark across exec into ru_maxrss (late in a full run pytest holds over 200 MiB).
MEASURE = """
import os, resource, subprocess, sys
limit, timeout_s, out_path, err_path, *argv = sys.argv[1:]
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
with open(out_path, "wb") as out, open(err_path, "wb") as err:  # files: wait4 reaps, not communicate
    child = subprocess.Popen(argv, stdout=out, stderr=err, preexec_fn=cap, stdin=subprocess.DEVNULL,
                             env={**os.environ, "FAFORGE_DOCTOR_TIMEOUT": timeout_s})
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss << 10)
"""


def measured_doctor(python: Path, out_dir: Path, timeout_s: int = 60) -> tuple[int, str, str, int, float]:
    """(exit code, stdout, stderr, peak RSS in bytes, seconds) of `faforge doctor --json --python PYTHON`."""
    started = time.monotonic()
    argv = [sys.executable, "-m", "faforge", "doctor", "--json", "--python", str(python)]
    measured = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURE,
            str(ADDRESS_SPACE),
            str(timeout_s),
            str(out_dir / "stdout"),
            str(out_dir / "stderr"),
            *argv,
        ],
        capture_output=True,
        text=True,
        timeout=timeout_s + 60,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    code, rss = (int(word) for word in measured.stdout.split())
    return (
        code,
        (out_dir / "stdout").read_text(errors="replace"),
        (out_dir / "stderr").read_text(errors="replace"),
        rss,
        time.monotonic() - started,
    )


@pytest.mark.parametrize(
    ("body", "stream"),
    [
        ("tr '\\0' x < /dev/zero", "stdout"),
        ("tr '\\0' x < /dev/zero >&2", "stderr"),
        ("yes", "stdout"),
        ("yes >&2", "stderr"),
    ],
    ids=["stdout-no-newline", "stderr-no-newline", "stdout-lines", "stderr-lines"],
)
def test_output_without_end_is_read_under_the_cap(tmp_path, body, stream):
    """Before: stdout was kept whole and re-split at every read (quadratic without a newline), stderr kept
    whole: memory ran out under the limit (a traceback) or the flood ran until the deadline."""
    code, out, err, rss, seconds = measured_doctor(interpreter(tmp_path, "python3", body), tmp_path)
    assert "Traceback" not in err, err[-3000:]
    assert code == 1, err[-3000:]
    assert f"it printed more than {OUTPUT_CAP >> 20} MiB on {stream} waiting for the interpreter to start" in err, err[
        -3000:
    ]
    assert json.loads(out)["error"]["kind"] == "problems"
    assert rss < MAX_RSS, f"doctor peaked at {rss >> 20} MiB"
    assert seconds < 40, f"{seconds:.0f} s: the cap, not the 60 s deadline, must stop it"


LINES = {
    "missing-keys": ('{"stage": "env"}', "env.python is missing"),
    "wrong-types": ('{"stage": "env", "python": 5, "system": []}', "env.python is an integer, not an object"),
    "deep": ("[" * 100_000 + "]" * 100_000, "it nests deeper than 64 levels"),
    "deep-value": ('{"stage": "env", "python": ' + "[" * 200 + "]" * 200 + "}", "it nests deeper than 64 levels"),
    "invalid-json": ('{"stage": "env", "python": ', "is not valid JSON"),
    "nan": ('{"stage": "env", "python": NaN}', "NaN is not a number JSON allows"),
    "version-number": (PROBE_ENV.replace('"3.12.0"', "3.12"), "env.python.version is a number, not a string"),
    "capability": (
        PROBE_ENV
        + "\n"
        + PROBE_MARK
        + '{"stage": "torch", "imported": true, "devices": [{"name": "x", "capability": [9]}]}',
        "torch.devices[0].capability is a list, not a list of two",
    ),
    "imported-text": (
        PROBE_ENV + "\n" + PROBE_MARK + '{"stage": "torch", "imported": "yes"}',
        "torch.imported is a string, not true or false",
    ),
    "twice": (PROBE_ENV + "\n" + PROBE_MARK + PROBE_ENV, "its stage 'env' came twice"),
}


@pytest.mark.parametrize(("line", "says"), list(LINES.values()), ids=list(LINES))
def test_a_probe_line_of_the_wrong_shape_is_exit_2(run_doctor, tmp_path, line, says):
    """Before: a KeyError, TypeError or RecursionError traceback, or the line silently ignored."""
    lines = (PROBE_MARK + line).split("\n")
    (tmp_path / "lines").write_text("".join(f"{text}\n" for text in lines))
    python = interpreter(tmp_path, "python3", f"cat {tmp_path / 'lines'}")
    result = run_doctor("--python", python)  # asserts no traceback, and the JSON error object's schema
    errors = [line for line in result.stderr.splitlines() if line.startswith("faforge doctor: error:")]
    assert result.code == 2 and len(errors) == 1, result.stderr
    assert f"--python {python}: a line of faforge's probe" in errors[0] and says in errors[0], errors[0]
    assert result.report["error"]["kind"] == "bad-input"


DAEMON = """
import os, time
if os.fork() == 0:  # a daemon, made the classic way: fork, setsid, fork again, let go of stdio
    os.setsid()
    daemon = os.fork()
    if daemon:
        open({pidfile!r}, "w").write(str(daemon))
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in {fds}:
        os.dup2(null, fd)
    time.sleep(300)
    os._exit(0)
os.wait()
"""


def daemon_torch(venv: Path, pidfile: Path, fds: tuple[int, ...] = (0, 1, 2)) -> None:
    """A torch whose import leaves a daemon behind, in a session of its own, then fails to import."""
    torch = envs.site_packages(venv) / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text(
        DAEMON.format(pidfile=str(pidfile), fds=fds) + "raise ImportError('no torch here')\n"
    )


@pytest.mark.parametrize("fds", [(0, 1, 2), (0,)], ids=["let-go-of-stdio", "holds-stdout"])
def test_a_daemon_the_probe_leaves_is_gone_when_doctor_returns(run_doctor, tmp_path, fds):
    """Before: killing the probe's process group missed a daemon in a session of its own; it outlived doctor
    (and one holding the probe's stdout kept doctor waiting until its deadline)."""
    venv = envs.pyenv_venv(tmp_path / "venv", "3.12")
    pidfile = tmp_path / "daemon.pid"
    daemon_torch(venv, pidfile, fds)
    started = time.monotonic()
    result = run_doctor("--python", venv, "--timeout", "60")
    assert time.monotonic() - started < 45, "a daemon holding stdout kept doctor waiting for its deadline"
    assert result.code == 1 and "torch-import-failed" in result.kinds(), result.stderr
    assert not [pid for pid in pids_from(pidfile) if running(pid)], "the probe's daemon outlived doctor"


@pytest.mark.parametrize(
    "body",
    [
        "setsid sh -c 'echo $$ > {pids}; exec sleep 300' </dev/null >/dev/null 2>&1 &\nsleep 0.5\nexit 1",
        "setsid sh -c 'echo $$ > {pids}; exec sleep 300' &\nexec sleep 300",
    ],
    ids=["exits", "hangs"],
)
def test_a_setsid_grandchild_of_a_hostile_interpreter_is_gone(run_doctor, tmp_path, body):
    pidfile = tmp_path / "pids"
    result = run_doctor("--python", interpreter(tmp_path, "python3", body.format(pids=pidfile)), "--timeout", "3")
    assert result.code in (1, 2), result.stderr
    assert not [pid for pid in pids_from(pidfile) if running(pid)], (
        "the interpreter's setsid grandchild outlived doctor"
    )


def test_doctor_in_process_leaves_no_daemon_and_this_process_as_it_was(tmp_path, capsys):
    """Tests (the hostile-input harness) run doctor inside pytest: the subreaper is the warden, never
    this process, and the daemon is gone all the same."""
    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(-1)
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    before = flag.value
    venv = envs.pyenv_venv(tmp_path / "venv", "3.12")
    pidfile = tmp_path / "daemon.pid"
    daemon_torch(venv, pidfile)
    assert cli.main(["doctor", "--json", "--python", str(venv), "--timeout", "60"]) == 1
    assert json.loads(capsys.readouterr().out)["healthy"] is False
    assert not [pid for pid in pids_from(pidfile) if running(pid)], "the probe's daemon outlived doctor"
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    assert flag.value == before, "doctor changed the subreaper flag of the process that called it"


@pytest.mark.parametrize(
    "raise_",
    [
        "raise ImportError('no torch: ' + 'x' * 20_000_000)",
        "class Odd(ImportError):\n    def __str__(self):\n        raise RuntimeError('no str')\nraise Odd()",
    ],
    ids=["20-MB-message", "str-raises"],
)
def test_a_torch_error_the_probe_cannot_print_whole_is_still_diagnosed(run_doctor, tmp_path, raise_):
    """Before: a 20 MB message made a probe line over the output cap, and a message whose str() raises
    crashed the probe's torch stage; the probe cuts the one and names the other."""
    venv = envs.pyenv_venv(tmp_path / "venv", "3.12")
    torch = envs.site_packages(venv) / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text(raise_ + "\n")
    result = run_doctor("--python", venv, "--timeout", "60")
    assert result.code == 1, result.stderr
    problem = result.problem("torch-import-failed")
    assert "did not finish" not in json.dumps(problem) and "died" not in json.dumps(problem), problem
    assert len(json.dumps(problem)) < 20_000, "the message reached the report uncut"


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGKILL, -signal.SIGKILL)], ids=["ctrl-c", "killed"]
)
def test_doctor_interrupted_or_killed_leaves_nothing_of_the_probe(tmp_path, signum, code):
    """Ctrl-C: doctor stops the warden on its way out (exit 130). SIGKILL: doctor cannot, and the warden,
    told of its parent's death (PR_SET_PDEATHSIG), clears all the same."""
    pidfile = tmp_path / "pids"
    python = interpreter(tmp_path, "python3", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' &\nexec sleep 300")
    child = subprocess.Popen(
        [sys.executable, "-m", "faforge", "doctor", "--python", str(python), "--timeout", "120"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        # SIGINT at its default, as a terminal's process has it: a suite started in the background (`.ci/run &`)
        # runs with SIGINT ignored, which doctor would inherit and keep, and then no Ctrl-C reaches it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    pids = pids_from(pidfile)
    child.send_signal(signum)
    _, err = child.communicate(timeout=60)
    assert child.returncode == code and "Traceback" not in err.decode(), err.decode()
    deadline = time.monotonic() + 10  # killed: the warden clears after doctor is gone
    while [pid for pid in pids if running(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if running(pid)], "the probe's processes outlived doctor"
