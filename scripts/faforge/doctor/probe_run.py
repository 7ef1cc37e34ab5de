"""Run the probe (faforge.doctor.probe_source) inside the interpreter to inspect, bounded in time, and hear its
stages as they come.

Apart from the facts it yields because running another interpreter has its own troubles: a cold
torch import, a hung driver or file system, output without end, processes that outlive it (a
`setsid` daemon), an argument that is not an interpreter at all. The probe runs under
faforge.doctor.warden, the subreaper that leaves none of its processes behind; its output is read
under OUTPUT_CAP; its marked lines are checked by faforge.doctor.probe_lines, and
faforge.doctor.facts turns the stages into typed facts.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faforge.abi.emulator import interpreter_command
from faforge.doctor.probe_lines import MARK, read_line
from faforge.doctor.probe_source import probe_source
from faforge.errors import EXIT_BAD_INPUT, EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN

WARDEN = Path(__file__).with_name("warden.py")
# The most the probe may print on stdout, and on stderr: its own lines are well under 1 MiB; past the
# cap it is stopped as at its deadline (an interpreter that floods its output is a finding, not a
# reason to use memory without end). Of each stream only the last TAIL_BYTES are kept, for messages.
OUTPUT_CAP = 8 << 20
TAIL_BYTES = 64 << 10
MARK_BYTES = MARK.encode()
# How long the warden may take to kill and reap what the probe left (it gives up on a process it may
# not kill after warden.CLEAR_S).
WARDEN_EXIT_S = 30
# Importing a CUDA torch from a cold disk takes tens of seconds; a hung driver or file system must not
# hang doctor. FAFORGE_DOCTOR_TIMEOUT or `doctor --timeout` change it.
PROBE_TIMEOUT_S = 120
# What the probe does after each stage it reports (probe.py's main()), for the progress line.
WAITING_FOR = {
    None: "the interpreter to start and list its packages",
    "env": "`import torch`",
    "torch": f"`import {FLASH_ATTN.extension}`",
}


def resolve_interpreter(given: str | None) -> Path:
    """The interpreter to inspect: --python PATH (a file, or an environment folder), else this one."""
    if given is None:
        return Path(sys.executable)
    if not given.strip():  # `--python "$CONDA_PREFIX"` outside a conda environment
        raise FaforgeError(
            "--python '': empty, as an unset variable such as $CONDA_PREFIX gives",
            hint="activate the environment first (conda activate NAME), or pass its folder or python",
        )
    path = Path(os.path.abspath(Path(given).expanduser()))  # absolute, but keep the venv's symlink
    if path.is_dir():
        candidates = [path / "bin" / "python", path / "bin" / "python3"]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise FaforgeError(
                f"--python {given}: a folder without bin/python; pass an interpreter or an environment folder",
                hint="e.g. --python ~/venvs/train/bin/python or --python $CONDA_PREFIX",
            )
        return found
    if not path.exists():
        raise FaforgeError(
            f"--python {given}: no such file",
            hint="pass the python of the environment to inspect, e.g. $CONDA_PREFIX/bin/python",
        )
    if not os.access(path, os.X_OK):
        raise FaforgeError(
            f"--python {given}: not executable, so not a Python interpreter",
            hint="pass the python of the environment to inspect, e.g. .venv/bin/python",
        )
    return path


def probe_timeout(given: float | None = None) -> float:
    """--timeout, else FAFORGE_DOCTOR_TIMEOUT, else PROBE_TIMEOUT_S."""
    if given is not None:
        value, source = given, "--timeout"
    else:
        raw = os.environ.get("FAFORGE_DOCTOR_TIMEOUT")
        if raw is None:
            return PROBE_TIMEOUT_S
        source = f"FAFORGE_DOCTOR_TIMEOUT={raw[:40]}"
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
    if not 0 < value <= 24 * 3600:
        raise FaforgeError(f"{source}: not a number of seconds between 0 and 86400", hint="e.g. --timeout 60")
    return value


@dataclass(frozen=True)
class Ended:
    """How a bounded run ended: the last bytes of its stdout and stderr, its exit code (negative: a
    signal; None: it was stopped) and why it was stopped."""

    stdout: str
    stderr: str
    code: int | None
    stopped: str | None


class _Streams:
    """The probe's stdout and stderr as they come: its marked lines handed on at once, a tail of each
    stream kept for messages, and at most OUTPUT_CAP bytes of each read. Linear in what is read: each
    chunk is split once (in C: a flood of short lines costs no Python per line but a prefix test), and
    the unfinished line is joined once, when it ends."""

    def __init__(self, on_line: Callable[[str | None], None]) -> None:
        self.on_line = on_line
        self.seen = {"stdout": 0, "stderr": 0}
        self.tails = {"stdout": b"", "stderr": b""}
        self.pending = bytearray()

    def take(self, name: str, chunk: bytes) -> str | None:
        """Read `chunk` of stream `name`; why to stop the probe when it is past the cap."""
        self.seen[name] += len(chunk)
        self.tails[name] = (self.tails[name] + chunk)[-TAIL_BYTES:]
        if self.seen[name] > OUTPUT_CAP:
            return f"it printed more than {OUTPUT_CAP >> 20} MiB on {name}"
        if name == "stdout":
            lines = chunk.split(b"\n")
            if len(lines) > 1:
                lines[0] = bytes(self.pending) + lines[0]
                self.pending.clear()
                for line in [line for line in lines[:-1] if line.startswith(MARK_BYTES)]:
                    self.on_line(line.decode(errors="replace"))
            self.pending += lines[-1]
        return None

    def tail(self, name: str) -> str:
        return self.tails[name].decode(errors="replace")


def _run_bounded(
    cmd: list[str], source: str, timeout_s: float, on_line: Callable[[str | None], None], **popen: Any
) -> Ended:
    """Run cmd under faforge.doctor.warden with `source` on stdin. Stopped at timeout_s, or when it
    prints more than OUTPUT_CAP bytes on stdout or on stderr; either way, and when it ends by itself,
    every process it started is gone when this returns (the warden is their subreaper).

    on_line hears None once the process started, then each marked line of its stdout (probe_lines.MARK) as it comes."""
    status_read, status_write = os.pipe()
    try:
        # `python -I -S`: the warden needs the standard library only, and no variable or site of the user's.
        warden = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WARDEN), str(status_write), str(os.getpid()), *cmd],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(status_write,),
            start_new_session=True,
            **popen,
        )
    except BaseException:
        os.close(status_read)
        raise
    finally:
        os.close(status_write)
    assert warden.stdin and warden.stdout and warden.stderr  # all three are pipes
    on_line(None)
    streams = _Streams(on_line)
    deadline = time.monotonic() + timeout_s
    stopped: str | None = None
    try:
        try:
            warden.stdin.write(source.encode())
            warden.stdin.close()
        except BrokenPipeError:
            pass
        with selectors.DefaultSelector() as selector:
            selector.register(warden.stdout, selectors.EVENT_READ, "stdout")
            selector.register(warden.stderr, selectors.EVENT_READ, "stderr")
            while selector.get_map() and stopped is None and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif (stopped := streams.take(key.data, chunk)) is not None:
                        break
        if stopped is None and selector.get_map():
            stopped = f"timed out after {timeout_s:g} s"
        if stopped is None:
            try:
                warden.wait(max(deadline - time.monotonic(), 0.5))
            except subprocess.TimeoutExpired:  # closed its output but did not exit
                stopped = f"timed out after {timeout_s:g} s"
    finally:
        outcome = _end(warden, status_read)
    if outcome.startswith("error "):
        number = int(outcome.split()[1])
        raise OSError(number, os.strerror(number))
    code = int(outcome.split()[1]) if outcome.startswith("exit ") and stopped is None else None
    return Ended(
        streams.tail("stdout"), streams.tail("stderr"), code, stopped or (None if code is not None else "stopped")
    )


def _end(warden: subprocess.Popen, status_read: int) -> str:
    """Stop the warden if it still runs (it kills and reaps everything below it first) and read its status line."""
    try:
        if warden.poll() is None:
            warden.send_signal(signal.SIGTERM)
        try:
            warden.wait(WARDEN_EXIT_S)
        except subprocess.TimeoutExpired:  # never seen: a warden that hangs is killed, its group with it
            with contextlib.suppress(OSError):
                os.killpg(warden.pid, signal.SIGKILL)
            warden.wait()
        return os.read(status_read, 256).decode(errors="replace")
    finally:
        os.close(status_read)
        assert warden.stdout and warden.stderr  # pipes (_run_bounded)
        warden.stdout.close()
        warden.stderr.close()


def run_probe(
    python: Path,
    timeout_s: float = PROBE_TIMEOUT_S,
    progress: Callable[[str], None] = lambda message: None,
    names: tuple[str, str, str] = (FLASH_ATTN.extension, FLASH_ATTN.package, FLASH_ATTN.kernel_package),
) -> tuple[dict, str | None]:
    """The probe's stages by name, and why it stopped early (None when it finished). `names`: the family's
    extension module, package and kernel package the probe looks for (flash-attn's by default).

    `progress` hears what the probe is waiting for before each stage, so a slow import is never silent.
    """
    stages: dict = {}

    def on_line(line: str | None) -> None:
        if line is None:
            progress(f"waiting for {WAITING_FOR[None]}: {python} (up to {timeout_s:g} s)")
            return
        read = read_line(line, python, stages)  # a marked line that is not the probe's is exit 2
        if read is None:
            return
        stage, data = read
        stages[stage] = data
        if stage in WAITING_FOR:
            progress(f"waiting for {WAITING_FOR[stage]} in {python} (up to {timeout_s:g} s)")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    with tempfile.TemporaryDirectory(prefix="faforge-doctor-") as cwd:  # keep the cwd off the target's sys.path
        try:
            # The source goes in on stdin (`python -`), so `ps` shows a short command line; the family's
            # names go as arguments, since the target interpreter cannot import faforge.family.
            # Another machine's interpreter (an aarch64 prefix here) runs under qemu: faforge.abi.emulator.
            cmd = [*interpreter_command(python), "-", *names]
            ended = _run_bounded(cmd, probe_source(), timeout_s, on_line, cwd=cwd, env=env)
        except OSError as exc:
            raise FaforgeError(
                f"--python {python}: cannot run it: {exc.strerror or exc}",
                hint="pass a Python interpreter, e.g. .venv/bin/python",
            ) from None
    stopped, code = ended.stopped, ended.code
    if "env" not in stages:
        if stopped:
            flooded = "printed more than" in stopped
            raise FaforgeError(
                f"--python {python}: {stopped} waiting for {WAITING_FOR[None]}; the probe was stopped "
                "(with every process it started)",
                hint=f"does a sitecustomize or .pth file print without end? `{python} -c pass` shows it"
                if flooded
                else "a hung file system or a very slow disk? pass --timeout SECONDS to wait longer",
                exit_code=EXIT_PROBLEMS,
            )
        tail = (ended.stderr or ended.stdout).strip().splitlines()[-1:] or ["no output"]
        raise FaforgeError(
            f"--python {python}: did not run faforge's probe, so it is not a usable Python 3 interpreter "
            f"(exit {code}: {tail[0][:200]})",
            hint="pass the python of the environment to inspect",
            exit_code=EXIT_BAD_INPUT,
        )
    if stopped is None and code:  # an exit code comes whenever nothing stopped it
        stopped = f"the interpreter died with {'signal ' + str(-code) if code < 0 else 'exit code ' + str(code)}"
    return stages, stopped
