"""A Ctrl-C that CPython cannot raise where it lands.

CI saw it (seed 9569 of the channel's fault-injection test): SIGINT arrived while importlib ran a weakref
callback that drops a module lock. An exception there is "unraisable": CPython printed
"Exception ignored in ... Traceback ... KeyboardInterrupt" and went on as if no key had been pressed.
These tests put a real KeyboardInterrupt into a real weakref callback inside a real faforge run, at the
moment a command's module is imported, through both entry points (`python -m faforge`, and the console
script pip wrote into this environment's bin/)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from faforge import cli

# Raises KeyboardInterrupt inside a weakref callback (unraisable, like importlib's module-lock `cb`) when
# faforge imports the chosen command's module, then lets the import finish.
INTERRUPT_IN_A_CALLBACK = textwrap.dedent("""
    import importlib.abc, sys, weakref

    class Doomed:
        pass

    def callback(_ref):
        raise KeyboardInterrupt

    class InterruptOnImport(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "faforge.commands.matrix":
                doomed = Doomed()
                ref = weakref.ref(doomed, callback)
                del doomed  # the callback runs here, and its exception is unraisable
            return None

    sys.meta_path.insert(0, InterruptOnImport())
""")

CONSOLE_SCRIPT = Path(sys.executable).parent / "faforge"


def run_child(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """The child with SIGINT at its default, as a terminal's process has it: a shell starts `cmd &` with
    SIGINT ignored, which the child inherits and keeps, and a process that ignores SIGINT has no Ctrl-C
    to deliver (seen: `.ci/run` started in the background failed these tests with "Exception ignored")."""
    return subprocess.run(argv, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kwargs)


ENTRY_POINTS = {
    "python -m faforge": "import runpy; runpy.run_module('faforge', run_name='__main__')",
    "console script": f"import runpy; runpy.run_path({str(CONSOLE_SCRIPT)!r}, run_name='__main__')",
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_an_interrupt_in_a_callback_stops_the_command_with_130_and_no_traceback(entry):
    code = INTERRUPT_IN_A_CALLBACK + ENTRY_POINTS[entry]
    result = run_child([sys.executable, "-c", code, "matrix", "--json"], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr
    assert result.returncode == 130, (result.returncode, result.stderr)
    assert result.stderr.startswith("faforge matrix: interrupted"), result.stderr
    # --json: the one object on stdout is the interrupt, not the matrix the command would have printed
    assert json.loads(result.stdout) == {
        "version": 1,
        "error": {"kind": "interrupted", "message": "interrupted", "input": None},
    }


def test_the_console_script_is_the_one_that_takes_over_interrupts():
    assert "from faforge.cli import console_main" in CONSOLE_SCRIPT.read_text(), "reinstall faforge (pip install -e .)"


def test_calling_main_inside_another_process_leaves_its_unraisable_hook_alone(capsys):
    """Tests and faforge.bench.build_cost call cli.main in their own process (here pytest's, whose hook
    reports unraisable exceptions of later tests)."""
    before = sys.unraisablehook
    assert cli.main(["matrix", "--json"]) == 0
    capsys.readouterr()
    assert sys.unraisablehook is before


def test_other_unraisable_exceptions_are_still_reported():
    """Only the interrupt is re-delivered; any other exception in a callback keeps CPython's report."""
    code = textwrap.dedent("""
        import weakref
        from faforge.interrupts import deliver_swallowed_interrupts
        deliver_swallowed_interrupts()
        class Doomed: pass
        def callback(_ref): raise ValueError("in a callback")
        doomed = Doomed(); ref = weakref.ref(doomed, callback); del doomed
        print("went on")
    """)
    result = run_child([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout == "went on\n"
    assert "Exception ignored" in result.stderr and "ValueError: in a callback" in result.stderr


@pytest.mark.parametrize("when", ["atexit", "module teardown"])
def test_an_interrupt_after_the_command_finished_leaves_its_exit_status(when):
    """At shutdown there is nothing left to stop: no traceback, and the command's own status."""
    code = textwrap.dedent("""
        import atexit, sys, time, weakref
        from faforge.interrupts import deliver_swallowed_interrupts
        deliver_swallowed_interrupts()
        class Doomed: pass
        def callback(_ref): raise KeyboardInterrupt
        def drop():
            doomed = Doomed(); ref = weakref.ref(doomed, callback); del doomed
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:  # clean-up goes on after the interrupt; nothing may break it
                pass
            print("clean-up finished")
        if WHEN == "atexit":
            atexit.register(drop)
        else:  # __main__'s globals are cleared in order at shutdown: `doomed` goes while `ref` still lives
            doomed = Doomed(); ref = weakref.ref(doomed, callback)
        sys.exit(3)
    """).replace("WHEN", repr(when))
    result = run_child([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (3, "")
    assert result.stdout == ("clean-up finished\n" if when == "atexit" else "")
