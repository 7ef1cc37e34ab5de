"""One library the loader found, and which symbol references bind to it, by glibc's check_match rules.

Apart from the closure walk because binding is asked thousands of times per check: the tables
are read on first use, and exact names are looked up through .gnu.hash (faforge.abi.elf_hash).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from faforge.abi.elf import ElfInfo, read_dynamic_symbols
from faforge.abi.elf_file import ElfFile
from faforge.abi.elf_hash import HashedExports, gnu_hash, hashed_exports
from faforge.abi.elf_symbols import DynamicSymbols
from faforge.abi.elf_versions import version_definitions


@dataclass(frozen=True)
class Library:
    """A library found for a DT_NEEDED entry; its tables are read on first use."""

    name: str  # the DT_NEEDED name it was loaded under
    path: Path
    info: ElfInfo
    needed_by: str

    @cached_property
    def symbols(self) -> DynamicSymbols:
        """The whole symbol table (only needed to explain a missing symbol)."""
        return read_dynamic_symbols(self.path)

    @cached_property
    def exports(self) -> dict[str, tuple[tuple[str | None, bool], ...]]:
        return self.symbols.exports()

    @cached_property
    def export_text(self) -> str:
        """All exported names, one per line, for fast substring searches."""
        return "\n".join(self.exports)

    @cached_property
    def defines(self) -> tuple[str, ...]:
        """The symbol versions this library defines (GLIBC_2.28, ...)."""
        with ElfFile(self.path) as elf:
            return version_definitions(elf)[0]

    @cached_property
    def _hashed(self) -> HashedExports | None:
        with ElfFile(self.path) as elf:
            return hashed_exports(elf)

    def might_define(self, hashes: list[int]) -> list[bool]:
        """A cheap first filter for many names (by elf_hash.gnu_hash): False means certainly not here."""
        if self._hashed is not None:
            return self._hashed.might_define(hashes)
        return [True] * len(hashes)

    def definitions(self, name: str, hashed: int) -> tuple[tuple[str | None, bool], ...]:
        """Exported definitions of `name` as (version, hidden); `hashed` is elf_hash.gnu_hash(name)."""
        if self._hashed is not None:
            return self._hashed.lookup(name, hashed)
        return self.exports.get(name, ())  # no .gnu.hash (old DT_HASH-only linkers): read the whole table

    def provides(self, name: str, version: str | None, hashed: int | None = None) -> bool:
        """Whether a reference to name (@version) binds here, by glibc's check_match rules."""
        for defined, hidden in self.definitions(name, gnu_hash(name) if hashed is None else hashed):
            if version is None and not hidden:
                return True
            if version is not None and (defined == version or (defined is None and not hidden)):
                return True
        return False
