"""What the release layer reports progress through, so that only the CLI prints (faforge.progress is one)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol


class Reporter(Protocol):
    def say(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def step(self, title: str) -> AbstractContextManager:
        """A timed step; the block sets `failed` or `skipped` on what it yields."""
        ...
