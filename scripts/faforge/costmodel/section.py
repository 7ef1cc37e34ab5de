"""A family's own section of `faforge bench-build`'s report: what its packages cost, from its timed compiles.

The house's report (per TU class, per cell) is flash-attn's kernel library; a family with other TUs (a
stable-ABI package's) gives a section of its own through its plan namespace, as this Protocol says."""

from __future__ import annotations

from typing import Protocol


class CostSection(Protocol):
    @property
    def key(self) -> str:
        """Its key in `bench-build --json` (tests/schemas/bench-build.json)."""
        ...

    @property
    def heading(self) -> str:
        """The line the text report prints before its tables."""
        ...

    def as_json(self) -> dict: ...

    def tables(self) -> list[tuple[str, list[str], list[list]]]: ...

    def notes(self) -> list[str]: ...
