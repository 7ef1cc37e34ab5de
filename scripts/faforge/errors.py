"""Errors a user can act on. Inner code raises them; only the CLI prints them."""

from __future__ import annotations

# Exit codes shared by every subcommand.
EXIT_OK = 0
EXIT_PROBLEMS = 1  # the command ran and found problems (ABI mismatch, failed test, ...)
EXIT_BAD_INPUT = 2  # the user gave something unusable (missing file, unknown cell, ...)
EXIT_SKIPPED = 3  # nothing was verified (e.g. no usable GPU); never counts as a pass


class FaforgeError(Exception):
    """An actionable failure: what went wrong, why, and what to do next."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class DataError(FaforgeError):
    """A data file under variants/ is malformed: names the file, key and value."""

    def __init__(self, path, key: str, message: str, *, hint: str | None = None):
        super().__init__(f"{path}: {key}: {message}", hint=hint)
        self.path = path
        self.key = key
