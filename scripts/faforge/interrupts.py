"""Ctrl-C that lands in a callback still stops the command.

SIGINT raises KeyboardInterrupt wherever Python happens to be. Inside a callback CPython cannot raise
(a weakref finaliser, importlib's module-lock clean-up, a __del__), the exception is "unraisable": CPython
prints "Exception ignored ... Traceback ... KeyboardInterrupt" and carries on as if no key was pressed.
Seen in CI (the channel's fault-injection test, seed 9569)."""

from __future__ import annotations

import _thread
import signal
import sys
import threading


def _redeliver_interrupts(unraisable: sys.UnraisableHookArgs) -> None:
    """Interrupt the main thread again once this hook has returned, where the KeyboardInterrupt can be raised.

    Tripping the signal here (signal.raise_signal, _thread.interrupt_main) would raise it inside this hook,
    which CPython swallows the same way; a new thread trips it when it gets the GIL, i.e. after the main
    thread ran on (sys.getswitchinterval(), 5 ms). _thread, not threading: Thread.start() waits for the thread
    and so would let it trip the signal while this hook still runs."""
    if (
        not issubclass(unraisable.exc_type, KeyboardInterrupt)
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        sys.__unraisablehook__(unraisable)
    elif not sys.is_finalizing() and threading.main_thread().is_alive():
        _thread.start_new_thread(_thread.interrupt_main, (signal.SIGINT,))
    # else: the command has finished (interpreter shutdown, atexit); its exit status stands


def deliver_swallowed_interrupts() -> None:
    sys.unraisablehook = _redeliver_interrupts
