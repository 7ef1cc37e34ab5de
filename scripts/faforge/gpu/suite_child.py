"""The GPU suite's pytest as a child process: what it needs importable, its environment, and
stopping it like Ctrl-C on a time cap or SIGTERM.

A child, so that a crashing kernel fails the run instead of killing the caller. Only the standard
library: this module is shipped into conda test environments (faforge.gpu.run_suite.RECIPE_TEST_FILES).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import TextIO

import faforge
from faforge.family import FLASH_ATTN
from faforge.gpu.coverage import KERNELS_JSON_ENV

# Modules the suite's process imports besides torch and flash_attn, with the pip requirement that brings each
# (einops: flash_attn's own import needs it). Missing -> exit 2 with the install command, never a failed run.
SUITE_REQUIREMENTS = {"pytest": "pytest>=8", "einops": "einops"}
# After SIGINT, how long pytest gets to finish its report (junit.xml) before it is killed.
INTERRUPT_GRACE_S = 30


def interruptible() -> None:
    """In the suite's child, before exec: SIGINT back to its default. The time cap stops the suite with
    SIGINT, and a shell starts `cmd &` with SIGINT ignored, which exec keeps (seen: a backgrounded CI
    run's capped suite ran on for the 60 s grace)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def missing_requirements() -> list[str]:
    """pip requirements of modules the suite needs that are not importable here (einops only with flash_attn)."""
    wanted = {"pytest"} | ({"einops"} if importlib.util.find_spec(FLASH_ATTN.module) else set())
    return [SUITE_REQUIREMENTS[name] for name in sorted(wanted) if importlib.util.find_spec(name) is None]


def suite_env(kernels_json: Path) -> dict[str, str]:
    """The child's environment: faforge importable, no auto-loaded pytest plugins (one that breaks on the GPU
    machine's image would end the run before any test), unbuffered output, kernel recording on."""
    pythonpath = os.pathsep.join(filter(None, [str(Path(faforge.__file__).parents[1]), os.environ.get("PYTHONPATH")]))
    return dict(
        os.environ,
        PYTHONPATH=pythonpath,
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        PYTHONUNBUFFERED="1",
        **{KERNELS_JSON_ENV: str(kernels_json)},
    )


def run_child(
    command: list[str], env: dict[str, str], output: TextIO, log: TextIO, time_cap_s: float | None
) -> tuple[int, str | None]:
    """Run `command` (the suite's pytest), its output copied to `output` and `log`; (pytest's exit code,
    why it was stopped or None).

    A time cap, or SIGTERM (e.g. from `timeout`), interrupts pytest like Ctrl-C, so it still writes
    junit.xml; INTERRUPT_GRACE_S later it is killed."""
    stopped: list[str] = []
    with contextlib.ExitStack() as stack:
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=interruptible
        )
        stdout = child.stdout
        assert stdout is not None  # stdout=PIPE above
        stack.callback(stdout.close)

        def interrupt(why: str) -> None:
            if child.poll() is None and not stopped:
                stopped.append(why)
                child.send_signal(signal.SIGINT)

        timer = (
            threading.Timer(time_cap_s, interrupt, (f"stopped by the {time_cap_s:g} s time cap",))
            if time_cap_s
            else None
        )
        previous = signal.signal(signal.SIGTERM, lambda *_: interrupt("stopped by SIGTERM"))
        try:
            if timer:
                timer.start()
            for line in stdout:
                output.write(line)
                log.write(line)
            try:
                pytest_exit_code = child.wait(timeout=INTERRUPT_GRACE_S if stopped else None)
            except subprocess.TimeoutExpired:
                child.kill()
                pytest_exit_code = child.wait()
        finally:
            if timer:
                timer.cancel()
            signal.signal(signal.SIGTERM, previous)
    return pytest_exit_code, stopped[0] if stopped else None
