"""The dynamic symbol table (.dynsym) as columns, with each symbol's version resolved to its name.

What a file imports and exports; read as one block per table (see faforge.abi.elf_file) because
torch's libraries hold hundreds of thousands of symbols.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf_file import ElfError, ElfFile
from faforge.abi.elf_versions import VERSYM_HIDDEN, VersionNeed, version_definitions, version_needs, versym

SHT_DYNSYM = 11
SHN_UNDEF = 0
STB_WEAK = 2
EXPORTED_BINDINGS = (1, 2, 10)  # GLOBAL, WEAK, GNU_UNIQUE
EXPORTED_VISIBILITIES = (0, 3)  # DEFAULT, PROTECTED


@dataclass(frozen=True)
class Symbol:
    name: str
    version: str | None  # "GLIBC_2.28", or None for an unversioned symbol
    defined: bool
    weak: bool
    default_version: bool  # False for a hidden (name@VER, not name@@VER) definition


@dataclass(frozen=True)
class DynamicSymbols:
    """The .dynsym table as columns; row i of every column is symbol i (row 0 is the null symbol).

    Columns stay raw (st_info, st_other, st_shndx, .gnu.version) so that reading a large
    library costs one unpack; the questions below are answered in one pass each.
    """

    names: tuple[str, ...]
    info: tuple[int, ...]  # st_info: binding << 4 | type
    other: tuple[int, ...]  # st_other: visibility in the low 2 bits
    shndx: tuple[int, ...]  # 0 (SHN_UNDEF) for an imported symbol
    versym: tuple[int, ...]  # .gnu.version: a version_names key, | 0x8000 when hidden; 0/1 unversioned
    version_names: dict[int, str]
    needs: tuple[VersionNeed, ...]
    defines: tuple[str, ...]  # versions from .gnu.version_d, without the base (soname) entry

    def symbol(self, i: int) -> Symbol:
        raw = self.versym[i]
        return Symbol(
            self.names[i],
            self.version_names.get(raw & ~VERSYM_HIDDEN),
            self.shndx[i] != SHN_UNDEF,
            self.info[i] >> 4 == STB_WEAK,
            not raw & VERSYM_HIDDEN,
        )

    def all_symbols(self) -> Iterator[Symbol]:
        return (self.symbol(i) for i in range(1, len(self.names)))

    def undefined(self) -> list[Symbol]:
        """Symbols this object imports (weak ones included; callers decide whether those matter)."""
        return [self.symbol(i) for i in range(1, len(self.names)) if self.shndx[i] == SHN_UNDEF and self.names[i]]

    def exports(self) -> dict[str, tuple[tuple[str | None, bool], ...]]:
        """Exported name -> its definitions as (version or None, hidden): defined symbols with global,
        weak or unique binding and default or protected visibility."""
        one = {
            raw: ((self.version_names.get(raw & ~VERSYM_HIDDEN), bool(raw & VERSYM_HIDDEN)),)
            for raw in set(self.versym)
        }
        rows = zip(self.names, self.info, self.other, self.shndx, self.versym, strict=True)
        next(rows, None)  # the null symbol
        exported = [
            (name, raw)
            for name, info, other, shndx, raw in rows
            if shndx != SHN_UNDEF and info >> 4 in EXPORTED_BINDINGS and other & 3 in EXPORTED_VISIBILITIES
        ]
        table: dict[str, tuple[tuple[str | None, bool], ...]] = {name: one[raw] for name, raw in exported}
        if len(table) < len(exported):  # some names are defined under several versions (libc's memcpy)
            table = {}
            for name, raw in exported:
                table[name] = table.get(name, ()) + one[raw]
        return table


NO_SYMBOLS = DynamicSymbols((), (), (), (), (), {}, (), ())


def symbol_layout(elf: ElfFile) -> tuple[str, tuple[int, int, int, int]]:
    """The struct format of one .dynsym entry and where st_name, st_info, st_other, st_shndx sit in it."""
    if elf.elf_class == 64:
        return "IBBHQQ", (0, 1, 2, 3)  # name, info, other, shndx, value, size
    return "IIIBBH", (0, 3, 4, 5)  # name, value, size, info, other, shndx


def dynamic_symbols(elf: ElfFile) -> DynamicSymbols:
    """The dynamic symbol table of an open ELF file, with symbol versions resolved to names."""
    dynsym = elf.section_by_type(SHT_DYNSYM)
    if dynsym is None:
        return NO_SYMBOLS
    fmt, columns = symbol_layout(elf)
    rows = elf.rows(dynsym, fmt, ".dynsym")
    if not rows:
        return NO_SYMBOLS
    table = list(zip(*rows, strict=True))
    name_offsets, info, other, shndx = (table[c] for c in columns)
    needs, needed_names = version_needs(elf)
    defines, defined_names = version_definitions(elf)
    return DynamicSymbols(
        names=_names_at(elf.linked_strings(dynsym), name_offsets, elf.path),
        info=info,
        other=other,
        shndx=shndx,
        versym=tuple(versym(elf, len(rows))),
        version_names={**defined_names, **needed_names},
        needs=needs,
        defines=defines,
    )


def _names_at(strings: bytes, offsets: tuple[int, ...], path: Path) -> tuple[str, ...]:
    """The C string at each offset of a string table (faster than splitting the table, measured)."""
    if offsets and max(offsets) >= max(len(strings), 1):
        raise ElfError(f"{path}: malformed ELF: a .dynsym name lies past .dynstr ({len(strings)} bytes)")
    text = strings.decode("latin-1") + "\0"
    find = text.find
    return tuple(text[o : find("\0", o)] for o in offsets)
