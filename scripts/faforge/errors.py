"""Errors a user can act on. Inner code raises them; only the CLI prints them (faforge.cli._run)."""

from __future__ import annotations

import errno
import os
import urllib.error

# Exit codes shared by every subcommand (docs/reference/exit-codes.md is the user-facing table).
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (ABI mismatch, failed test, ...)
EXIT_BAD_INPUT = 2  # the user gave something unusable (missing file, unknown cell, unwritable output, ...)
EXIT_SKIPPED = 3  # nothing was verified (e.g. no usable GPU); never counts as a pass
EXIT_REMOTE = 4  # a network or remote-service failure (channel, index, upload server): retry or check the URL
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGINT, as shells report it (128 + 2)

# How much of a user's argument a message repeats: a 131 KB argument echoed in full buries the message.
SHORTEN_AT = 200


def shorten(text: str, limit: int = SHORTEN_AT) -> str:
    """`text`, or its head and tail around a count of what was left out, when longer than `limit`."""
    if len(text) <= limit:
        return text
    keep = limit // 2 - 10
    return f"{text[:keep]}…[{len(text.encode(errors='replace'))} bytes]…{text[-keep:]}"


def shorten_message(text: str) -> str:
    """A message shortened as `shorten` does, still naming every set FAFORGE_* variable it names: an
    error about a setting's value names the setting even when the value is too long to print whole."""
    short = shorten(text, 2 * SHORTEN_AT)
    if short == text:
        return text
    lost = sorted(n for n in os.environ if n.startswith("FAFORGE_") and n in text and n not in short)[:3]
    return f"{', '.join('$' + n for n in lost)}: {short}" if lost else short


class FaforgeError(Exception):
    """An actionable failure: what went wrong (naming the input), and what to do next.

    `detail` is the cause chain (e.g. py-rattler's), shown only with `faforge --verbose`."""

    exit_code = EXIT_BAD_INPUT

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        exit_code: int | None = None,
        input: str | None = None,
        detail: str | None = None,
    ):  # `input`, a builtin's name, is the contract's word
        first, _, rest = message.strip().partition("\n")
        super().__init__(first)
        self.message = first
        self.hint = hint
        self.input = None if input is None else str(input)
        self.detail = "\n".join(filter(None, [rest.strip(), detail])) or None
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def kind(self) -> str:
        """The `kind` of the --json error object."""
        return {EXIT_REMOTE: "remote", EXIT_PROBLEMS: "problems", EXIT_INTERRUPTED: "interrupted"}.get(
            self.exit_code, "bad-input"
        )

    def line(self) -> str:
        """`<what> (<input>) — <what to do>` on one line, long inputs shortened."""
        text = shorten_message(self.message)
        if self.input is not None and self.input not in self.message:
            text += f" ({shorten(self.input)})"
        return f"{text} — {shorten(' '.join(self.hint.split()), 2 * SHORTEN_AT)}" if self.hint else text

    def to_json(self) -> dict:
        """The versioned error object every --json command prints instead of its report."""
        error = {
            "kind": self.kind,
            "message": shorten_message(self.message),
            "input": None if self.input is None else shorten(self.input),
        }
        if self.hint:
            error["hint"] = self.hint
        return {"version": 1, "error": error}

    def __str__(self) -> str:
        return self.line()


class RemoteError(FaforgeError):
    """A channel, index or server could not be read or written: exit 4, so CI can tell it from bad input."""

    exit_code = EXIT_REMOTE


class DataError(FaforgeError):
    """A data file under variants/ is malformed: names the file, key and value."""

    def __init__(self, path: str | os.PathLike, key: str, message: str, *, hint: str | None = None):
        super().__init__(
            f"{path}: {key}: {message}",
            hint=hint or "correct it, or restore the file from git (`git checkout -- FILE`)",
        )
        self.path = path
        self.key = key


# errno -> (what is wrong with the path, what to do)
_PATH_PROBLEMS = {
    errno.EROFS: ("is on a read-only file system", "choose a writable location"),
    errno.EACCES: (
        "is not accessible (permission denied)",
        "choose a location you may read and write, or fix its permissions",
    ),
    errno.EPERM: ("is not accessible (operation not permitted)", "choose a location you may read and write"),
    errno.ENOTDIR: ("has a part that is a file, not a folder", "name a folder, or a path under one"),
    errno.EISDIR: ("is a folder, not a file", "name a file"),
    errno.EEXIST: ("exists and is not a folder", "remove it or choose another path"),
    errno.ENAMETOOLONG: ("has a name that is too long (more than 255 bytes in one part)", "use a shorter name"),
    errno.ENOSPC: ("cannot be written: no space left on the device", "free space or choose another location"),
    errno.ELOOP: ("is a symbolic link loop", "fix the link, or name the real path"),
    errno.ENOENT: ("does not exist", "check the path, or create what it names first"),
    errno.EDQUOT: ("cannot be written: disk quota exceeded", "free space or choose another location"),
}


def path_error(exc: OSError, option: str | None = None, path: str | os.PathLike | None = None) -> FaforgeError:
    """A FaforgeError naming the path (and the option it came from) for an OSError on a path the user chose.

    Network errors (which are OSErrors too) become RemoteError."""
    if isinstance(exc, (urllib.error.URLError, ConnectionError, TimeoutError)):
        reason = getattr(exc, "reason", None) or exc.strerror or exc
        return RemoteError(f"network error: {reason}", hint="check the URL and your network, then retry")
    named = path if path is not None else exc.filename
    code = errno.ELOOP if named is not None and _is_link_loop(named) else exc.errno
    fallback = (f"cannot be used: {exc.strerror or exc}", "check the path")
    what, todo = _PATH_PROBLEMS[code] if code in _PATH_PROBLEMS else fallback  # code: None without an errno
    subject = " ".join(filter(None, [option, os.fsdecode(named) if named is not None else "an output"]))
    return FaforgeError(f"{shorten(subject)} {what}", hint=todo, input=None if named is None else os.fsdecode(named))


def _is_link_loop(path: str | os.PathLike) -> bool:
    """mkdir and open of a symlink loop report EEXIST or ENOENT; stat says what it really is."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    except ValueError:  # a NUL byte in the name
        return False
    return False


def _missing(path: str | os.PathLike) -> str:
    """Why nothing usable is at `path`: a symlink loop or a dangling link is not "does not exist"."""
    if os.path.islink(path):
        return "is a symbolic link loop" if _is_link_loop(path) else "is a symbolic link to nothing"
    return "does not exist"


def why_not_a_folder(path: str | os.PathLike) -> str:
    """Why `path` cannot be used as a folder, in words: the real cause, not always "does not exist"."""
    return "is a file, not a folder" if os.path.exists(path) else _missing(path)


def why_not_a_file(path: str | os.PathLike) -> str:
    """Why `path` cannot be read as a file: a folder, a FIFO or device (reading blocks or never ends), or missing."""
    if os.path.isdir(path):
        return "is a folder, not a file"
    return "is not a regular file (a FIFO, socket or device)" if os.path.exists(path) else _missing(path)
