"""Run probe.py inside the interpreter to inspect, bounded in time, and hear its stages as they come.

Apart from the facts it yields because running another interpreter has its own troubles: a cold
torch import, a hung driver or file system, a process group to stop whole, an argument that is
not an interpreter at all. faforge.doctor.facts turns the stages into typed facts.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from faforge.emulator import interpreter_command
from faforge.errors import EXIT_BAD_INPUT, EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN

PROBE = Path(__file__).with_name("probe.py")
MARK = "@@faforge-probe@@"
# Importing a CUDA torch from a cold disk takes tens of seconds; a hung driver or file system must not
# hang doctor. FAFORGE_DOCTOR_TIMEOUT or `doctor --timeout` change it.
PROBE_TIMEOUT_S = 120
# What the probe does after each stage it reports (probe.py's main()), for the progress line.
WAITING_FOR = {None: "the interpreter to start and list its packages", "env": "`import torch`",
               "torch": f"`import {FLASH_ATTN.extension}`"}


def resolve_interpreter(given: str | None) -> Path:
    """The interpreter to inspect: --python PATH (a file, or an environment folder), else this one."""
    if given is None:
        return Path(sys.executable)
    if not given.strip():  # `--python "$CONDA_PREFIX"` outside a conda environment
        raise FaforgeError("--python '': empty, as an unset variable such as $CONDA_PREFIX gives",
                           hint="activate the environment first (conda activate NAME), or pass its folder or python")
    path = Path(os.path.abspath(Path(given).expanduser()))  # absolute, but keep the venv's symlink
    if path.is_dir():
        candidates = [path / "bin" / "python", path / "bin" / "python3"]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise FaforgeError(f"--python {given}: a folder without bin/python; pass an interpreter or an environment folder",
                               hint="e.g. --python ~/venvs/train/bin/python or --python $CONDA_PREFIX")
        return found
    if not path.exists():
        raise FaforgeError(f"--python {given}: no such file", hint="pass the python of the environment to inspect, e.g. $CONDA_PREFIX/bin/python")
    if not os.access(path, os.X_OK):
        raise FaforgeError(f"--python {given}: not executable, so not a Python interpreter",
                           hint="pass the python of the environment to inspect, e.g. .venv/bin/python")
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


def _run_bounded(cmd: list[str], source: str, timeout_s: float, on_line: Callable[[str | None], None],
                 **popen) -> tuple[str, str, int | None]:
    """Run cmd with `source` on stdin; stop its whole process group after timeout_s. (stdout, stderr, exit code or None).

    on_line hears None once the process started, then each line of its stdout as it comes."""
    # A new session: the probe and anything it starts (a torch import can spawn helpers) share one
    # process group, so a timeout kills them all, not just the interpreter.
    process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, **popen)
    on_line(None)
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        try:
            process.stdin.write(source.encode())
            process.stdin.close()
        except BrokenPipeError:
            pass
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, out)
            selector.register(process.stderr, selectors.EVENT_READ, err)
            pending = b""
            while selector.get_map() and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    key.data.extend(chunk)
                    if key.data is out:
                        *lines, pending = (pending + chunk).split(b"\n")
                        for line in lines:
                            on_line(line.decode(errors="replace"))
        if selector.get_map():  # still open at the deadline: the probe hangs
            return out.decode(errors="replace"), err.decode(errors="replace"), None
        return out.decode(errors="replace"), err.decode(errors="replace"), process.wait(max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:  # closed its output but did not exit
        return out.decode(errors="replace"), err.decode(errors="replace"), None
    finally:
        if process.poll() is None or _group_alive(process.pid):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()
        process.stdout.close()
        process.stderr.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_probe(python: Path, timeout_s: float = PROBE_TIMEOUT_S,
              progress: Callable[[str], None] = lambda message: None,
              names: tuple[str, str, str] = (FLASH_ATTN.extension, FLASH_ATTN.package, FLASH_ATTN.kernel_package)) -> tuple[dict, str | None]:
    """The probe's stages by name, and why it stopped early (None when it finished). `names`: the family's
    extension module, package and kernel package the probe looks for (flash-attn's by default).

    `progress` hears what the probe is waiting for before each stage, so a slow import is never silent.
    """
    stages: dict = {}

    def on_line(line: str | None) -> None:
        if line is None:
            progress(f"waiting for {WAITING_FOR[None]}: {python} (up to {timeout_s:g} s)")
            return
        if not line.startswith(MARK):
            return
        try:
            data = json.loads(line[len(MARK):])
        except json.JSONDecodeError:
            return
        stage = data.pop("stage", "?")
        stages[stage] = data
        if stage in WAITING_FOR:
            progress(f"waiting for {WAITING_FOR[stage]} in {python} (up to {timeout_s:g} s)")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    with tempfile.TemporaryDirectory(prefix="faforge-doctor-") as cwd:  # keep the cwd off the target's sys.path
        try:
            # The source goes in on stdin (`python -`), so `ps` shows a short command line; the family's
            # names go as arguments, since the target interpreter cannot import faforge.family.
            # Another machine's interpreter (an aarch64 prefix here) runs under qemu: faforge.emulator.
            cmd = [*interpreter_command(python), "-", *names]
            stdout, stderr, code = _run_bounded(cmd, PROBE.read_text(), timeout_s, on_line, cwd=cwd, env=env)
        except OSError as exc:
            raise FaforgeError(f"--python {python}: cannot run it: {exc.strerror or exc}",
                               hint="pass a Python interpreter, e.g. .venv/bin/python") from None
    stopped = f"timed out after {timeout_s:g} s" if code is None else None
    if "env" not in stages:
        if stopped:
            raise FaforgeError(f"--python {python}: {stopped} waiting for {WAITING_FOR[None]}; the probe was stopped "
                               "(with every process it started)",
                               hint="a hung file system or a very slow disk? pass --timeout SECONDS to wait longer",
                               exit_code=EXIT_PROBLEMS)
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        raise FaforgeError(f"--python {python}: did not run faforge's probe, so it is not a usable Python 3 interpreter "
                           f"(exit {code}: {tail[0][:200]})", hint="pass the python of the environment to inspect",
                           exit_code=EXIT_BAD_INPUT)
    if stopped is None and code != 0:
        stopped = f"the interpreter died with {'signal ' + str(-code) if code < 0 else 'exit code ' + str(code)}"
    return stages, stopped
