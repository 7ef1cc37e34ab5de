"""The CLI's two streams: stdout holds the result, stderr progress and errors; neither can raise.

A stream that is closed, full or left by its reader must end in an exit status, not a traceback,
and a progress line that cannot be written must not cost the work or its result. Every line also
passes printable() on its way out, so text from a package, an environment variable or a probed
interpreter cannot clear the screen, retitle the window or hide what follows.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager

# Anything but tab, newline and printable ASCII; most of it (✓, —, …) is printable and stays.
_SUSPECT = re.compile(r"[^\t\n\x20-\x7e]")


def printable(text: str) -> str:
    """`text` with control and other unprintable characters written as escapes, as repr() writes them (ESC: \\x1b)."""
    return _SUSPECT.sub(lambda m: m[0] if m[0].isprintable() else repr(m[0])[1:-1], text)


class Tolerant:
    """A text stream whose writes never raise: the first failure is kept in `failure`, later writes are dropped."""

    def __init__(self, stream):
        self.stream = stream
        # Python sets sys.stdout to None when fd 1 was closed when it started (`faforge ... >&-`).
        self.failure: OSError | None = None if stream is not None else OSError(errno.EBADF, os.strerror(errno.EBADF))

    def write(self, text: str) -> int:
        self._attempt(lambda: self.stream.write(printable(text)))
        return len(text)

    def flush(self) -> None:
        self._attempt(lambda: self.stream.flush())

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    def _attempt(self, action: Callable[[], object]) -> None:
        if self.failure is not None:
            return
        try:
            action()
        except (OSError, ValueError) as exc:  # ValueError: the file object itself was closed
            self.failure = exc if isinstance(exc, OSError) else OSError(errno.EBADF, str(exc))

    def __getattr__(self, name):  # encoding, fileno, buffer, ... of the stream itself
        return getattr(self.stream, name)


@contextmanager
def tolerant_streams():
    """sys.stdout and sys.stderr as Tolerant streams for the block; yields stdout's (its `failure` says
    whether the result was delivered), and puts the originals back afterwards."""
    saved = sys.stdout, sys.stderr
    out, err = Tolerant(sys.stdout), Tolerant(sys.stderr)
    sys.stdout, sys.stderr = out, err
    try:
        yield out
    finally:
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = saved


def reader_left(failure: OSError | None) -> bool:
    """The reader of a pipe closed it (`faforge matrix | head`): by convention no error, the reader had enough."""
    return failure is not None and failure.errno == errno.EPIPE


def reserve_standard_fds() -> None:
    """Open /dev/null on a closed fd 0, 1 or 2, so that no file faforge opens becomes a child's stdout;
    sys.stdout stays None, so a closed stdout is still reported."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free fd: this one


def settle_for_exit() -> None:
    """Flush the real stdout and stderr now; one that fails gets /dev/null under it, so that Python's own
    flush at exit does not fail on it again ("Exception ignored ... BrokenPipeError", exit 120)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
                stream.flush()
            except (OSError, ValueError):
                pass
        except AttributeError:  # None: closed when Python started
            pass
