"""An open ELF file: its header and section table, and bounds-checked reads of its sections.

The header and the section header table come from pyelftools (an ELFFile over the memory
map): a few dozen small records, where a maintained parser of the gABI layouts (32/64-bit,
both byte orders, the e_shnum/e_shstrndx overflow escapes, machine-specific section types)
is worth more than speed. Only section *headers* are parsed: building pyelftools' section
object for .gnu.hash parses its whole bloom filter and bucket array (14 ms per open of
libtorch_cuda.so, and a check opens ~70 files), and iterating symbols object by object took
1.8 s on torch's libraries (both measured).

The tables themselves are read by the modules beside this one (elf_symbols, elf_versions,
elf_hash, and elf for .dynamic), each as one block from the map unpacked as arrays
(struct.iter_unpack, array), so a 1 GB libtorch_cuda.so costs a few MB of memory and a
fraction of a second. Not numpy: importing it alone takes longer than reading all of torch's
symbol tables, and these modules are shipped into build and test environments that hold
little more than Python, torch and pyelftools (see faforge.abi.gate and the recipe's test
section).

Every malformed input raises ElfError (exit code 2) naming the file and what is wrong with
it, pyelftools' own exceptions included; nothing here prints.
"""

from __future__ import annotations

import mmap
import struct
import sys
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import StringTableSection

from faforge.errors import EXIT_BAD_INPUT, FaforgeError

if TYPE_CHECKING:
    from elftools.construct import MappingAdapter, Struct

# e_machine values, from the System V gABI registry (https://www.sco.com/developers/gabi/latest/ch4.eheader.html),
# named as `uname -m` does.
MACHINES = {
    3: "i386",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390x",
    40: "arm",
    62: "x86_64",
    183: "aarch64",
    190: "cuda",
    243: "riscv64",
    258: "loongarch64",
}

SHT_NOBITS = 8
# What pyelftools and the parsers under it raise on malformed input; each becomes an ElfError naming the file.
# (mmap raises ValueError/OverflowError for a seek past the end; AssertionError and IndexError come from
# pyelftools' own consistency checks.)
PARSE_ERRORS = (ELFError, struct.error, ValueError, OverflowError, IndexError, KeyError, AssertionError)


class ElfError(FaforgeError):
    """The file is missing, unreadable, not ELF, or malformed."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(
            message, hint=hint or "pass the extension .so, its wheel or conda package, or the folder it is installed in"
        )


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


class _Image:
    """Bounds-checked reads from a memory-mapped ELF file."""

    def __init__(self, path: Path):
        self.path = path
        try:
            with open(path, "rb") as f:
                self.size = f.seek(0, 2)
                if self.size == 0:
                    raise ElfError(f"{path}: empty file, not an ELF shared library")
                self.map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except FileNotFoundError:
            raise ElfError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise ElfError(f"{path}: is a directory, expected an ELF shared library") from None
        except (PermissionError, OSError, ValueError) as exc:
            raise ElfError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None

    def check(self, offset: int, size: int, what: str) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ElfError(
                f"{self.path}: truncated or malformed ELF: {what} lies outside the file "
                f"(bytes {offset}..{offset + size} of {self.size})"
            )

    def read(self, offset: int, size: int, what: str) -> bytes:
        self.check(offset, size, what)
        return self.map[offset : offset + size]

    def close(self) -> None:
        self.map.close()


class ElfFile:
    """An open ELF file; use as a context manager. Reads the header and section table on open."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.image = _Image(self.path)
        try:
            self._read_header()
        except BaseException:
            self.image.close()
            raise

    def __enter__(self) -> ElfFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.image.close()

    def _read_header(self) -> None:
        ident = self.image.map[:16]
        if ident[:4] == b"\x7fELF" and len(ident) < 16:
            raise ElfError(f"{self.path}: truncated ELF file ({len(ident)} bytes)")
        if ident[:4] != b"\x7fELF":
            raise ElfError(
                f"{self.path}: not an ELF file (starts with {bytes(ident[:4])!r}); "
                "expected a compiled extension module or shared library"
            )
        with self.parsing("malformed ELF header"):
            self.pyelf = ELFFile(cast(IO[bytes], self.image.map))  # an mmap reads and seeks like IO[bytes]
            self.elf_class, self.little_endian = self.pyelf.elfclass, self.pyelf.little_endian
            self.file_type = _number(self.pyelf.structs.Elf_Ehdr, "e_type", self.pyelf["e_type"])
            machine = _number(self.pyelf.structs.Elf_Ehdr, "e_machine", self.pyelf["e_machine"])
        self.bo = "<" if self.little_endian else ">"
        self.machine = MACHINES.get(machine, f"EM_{machine}")
        if self.machine == "ppc64" and self.little_endian:
            self.machine = "ppc64le"
        with self.parsing("malformed section table"):
            self.sections = self._read_sections()

    @contextmanager
    def parsing(self, what: str) -> Iterator[None]:
        """pyelftools' exceptions on malformed input, as ElfError naming this file."""
        try:
            yield
        except PARSE_ERRORS as exc:
            raise ElfError(f"{self.path}: {what}: {str(exc) or type(exc).__name__}") from None

    def _read_sections(self) -> list[Section]:
        """Section headers through pyelftools' Elf_Shdr layout, without building its section objects
        (see the module docstring)."""
        count, shoff, shentsize = self.pyelf.num_sections(), self.pyelf["e_shoff"], self.pyelf["e_shentsize"]
        if count == 0:
            return []
        layout = self.pyelf.structs.Elf_Shdr
        if shentsize < layout.sizeof():
            raise ElfError(f"{self.path}: malformed ELF: section header size {shentsize}, expected {layout.sizeof()}")
        self.image.check(shoff, count * shentsize, f"section table ({count} entries)")
        headers = [struct_parse(layout, self.pyelf.stream, shoff + i * shentsize) for i in range(count)]
        types = [_number(layout, "sh_type", h.sh_type) for h in headers]
        shstrndx, names = self.pyelf.get_shstrndx(), None
        if 0 < shstrndx < count and types[shstrndx] != SHT_NOBITS:
            names = StringTableSection(headers[shstrndx], "", self.pyelf)
            self.image.check(names["sh_offset"], names["sh_size"], "section name table")
        return [
            Section(
                names.get_string(h.sh_name) if names and h.sh_name < names["sh_size"] else "",
                type_,
                h.sh_offset,
                h.sh_size,
                h.sh_link,
                h.sh_entsize,
            )
            for h, type_ in zip(headers, types, strict=True)
        ]

    def section_by_type(self, type_: int) -> Section | None:
        return next((s for s in self.sections if s.type == type_), None)

    def section_by_name(self, name: str) -> Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def section_bytes(self, section: Section) -> bytes:
        if section.type == SHT_NOBITS:
            return b""
        return self.image.read(section.offset, section.size, f"section {section.name or section.type}")

    def linked_strings(self, section: Section) -> bytes:
        """The string table a section's sh_link points at."""
        return self.section_bytes(self.sections[self.link(section)])

    def link(self, section: Section) -> int:
        """The index of the section a section's sh_link names, once checked."""
        if not 0 < section.link < len(self.sections):
            raise ElfError(f"{self.path}: malformed ELF: section {section.name} links to section {section.link}")
        return section.link

    def rows(self, section: Section, fmt: str, what: str) -> list[tuple]:
        """A table section unpacked row by row (a partial last row is ignored)."""
        size = struct.calcsize(fmt)
        count = self.row_count(section, size, what)
        return list(struct.iter_unpack(self.bo + fmt, self.section_bytes(section)[: count * size]))

    def row_count(self, section: Section, size: int, what: str) -> int:
        """How many whole rows of `size` bytes a table section holds, once its entry size and extent are checked."""
        if section.entsize not in (0, size):
            raise ElfError(f"{self.path}: malformed ELF: {what} entry size {section.entsize}, expected {size}")
        if section.type == SHT_NOBITS:
            return 0
        self.image.check(section.offset, section.size, f"section {section.name or section.type}")
        return section.size // size

    def as_array(self, typecode: str, data: bytes) -> array:
        """`data` as an array of `typecode` in this machine's byte order."""
        values = array(typecode, data)
        if self.little_endian != (sys.byteorder == "little"):
            values.byteswap()
        return values


def _number(layout: Struct, field: str, value: int | str) -> int:
    """The number of an enum field that pyelftools decoded to its name ("SHT_DYNSYM", "EM_X86_64"),
    through the field's own mapping in pyelftools' struct layout; values it has no name for stay numbers."""
    if isinstance(value, int):
        return value
    enum = cast("MappingAdapter", next(c for c in layout.subcons if c.name == field))  # a named field is an Enum
    return enum.encoding[value]
