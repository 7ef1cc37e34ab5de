"""Read what the dynamic linker reads from an ELF file, and nothing else: the front door.

The header and .dynamic facts (DT_NEEDED, SONAME, RPATH, RUNPATH) are read here; the file
itself is opened by elf_file, the symbol table read by elf_symbols, symbol versions by
elf_versions and .gnu.hash lookups by elf_hash. read_info, read_dynamic_symbols and read_elf
are what most callers need, each with one open.

Every malformed input raises ElfError (exit code 2) naming the file and what is wrong with it;
nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, cast

from faforge.abi.elf_file import ElfError, ElfFile
from faforge.abi.elf_symbols import DynamicSymbols, dynamic_symbols

if TYPE_CHECKING:
    from elftools.elf.dynamic import DynamicSection

SHT_STRTAB = 3
SHT_DYNAMIC = 6
# The .dynamic tags kept, as pyelftools names them, and the DynamicTag attribute holding each one's string.
DYNAMIC_STRINGS = {"DT_NEEDED": "needed", "DT_SONAME": "soname", "DT_RPATH": "rpath", "DT_RUNPATH": "runpath"}


@dataclass(frozen=True)
class ElfInfo:
    """Header and dynamic-section facts of one ELF file."""

    path: Path
    elf_class: int  # 32 or 64
    little_endian: bool
    machine: str  # as `uname -m` names it ("x86_64", "aarch64"), or "EM_<n>" when unknown
    file_type: int  # ET_DYN = 3 for shared objects
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]

    @property
    def abi_key(self) -> tuple[str, int, bool]:
        """What must match between an object and the libraries it may load."""
        return (self.machine, self.elf_class, self.little_endian)


def elf_info(elf: ElfFile) -> ElfInfo:
    """The header and .dynamic facts of an open ELF file."""
    entries: dict[str, list[str]] = {tag: [] for tag in DYNAMIC_STRINGS}
    index = next((i for i, s in enumerate(elf.sections) if s.type == SHT_DYNAMIC), None)
    if index is not None:
        dynamic = elf.sections[index]
        strings = elf.sections[elf.link(dynamic)]
        if strings.type != SHT_STRTAB:
            raise ElfError(f"{elf.path}: malformed ELF: .dynamic links to section {dynamic.link}, not a string table")
        # Read no further than the section, whether or not a DT_NULL ends it (a corrupt one may not).
        count = elf.row_count(dynamic, elf.pyelf.structs.Elf_Dyn.sizeof(), ".dynamic")
        with elf.parsing("malformed .dynamic"):
            section = cast("DynamicSection", elf.pyelf.get_section(index))  # pyelftools' class for SHT_DYNAMIC
            for tag in islice(section.iter_tags(), count):
                if tag["d_tag"] in entries:
                    if tag["d_val"] >= strings.size:
                        raise ElfError(
                            f"{elf.path}: malformed ELF: .dynamic names string {tag['d_val']}, "
                            f"past its table ({strings.size} bytes)"
                        )
                    entries[tag["d_tag"]].append(getattr(tag, DYNAMIC_STRINGS[tag["d_tag"]]))
    split = lambda tag: tuple(p for e in entries[tag] for p in e.split(":") if p)  # noqa: E731 (a one-line helper)
    return ElfInfo(
        path=elf.path,
        elf_class=elf.elf_class,
        little_endian=elf.little_endian,
        machine=elf.machine,
        file_type=elf.file_type,
        soname=entries["DT_SONAME"][0] if entries["DT_SONAME"] else None,
        needed=tuple(entries["DT_NEEDED"]),
        rpath=split("DT_RPATH"),
        runpath=split("DT_RUNPATH"),
    )


def read_info(path: str | Path) -> ElfInfo:
    """Header, DT_NEEDED, SONAME, RPATH and RUNPATH of one ELF file."""
    with ElfFile(path) as elf:
        return elf_info(elf)


def read_dynamic_symbols(path: str | Path) -> DynamicSymbols:
    """The dynamic symbol table of one ELF file, with symbol versions resolved to names."""
    with ElfFile(path) as elf:
        return dynamic_symbols(elf)


def read_elf(path: str | Path) -> tuple[ElfInfo, DynamicSymbols]:
    """Both of the above with one open."""
    with ElfFile(path) as elf:
        return elf_info(elf), dynamic_symbols(elf)
