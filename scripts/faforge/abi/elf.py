"""Read what the dynamic linker reads from an ELF file, and nothing else.

Two kinds of data, each read the way that is fast for it:
  * The ELF header, the section header table and the .dynamic tags come from
    pyelftools (an ELFFile over the memory map): a few dozen small records,
    where a maintained parser of the gABI layouts (32/64-bit, both byte orders,
    the e_shnum/e_shstrndx overflow escapes, machine-specific section types)
    is worth more than speed. Only section *headers* are parsed: building
    pyelftools' section object for .gnu.hash parses its whole bloom filter and
    bucket array (14 ms per open of libtorch_cuda.so, and a check opens ~70
    files), and iterating symbols object by object took 1.8 s on torch's
    libraries (issue 3, "Performance").
  * The tables (.dynsym, .dynstr, .gnu.version, .gnu.version_r, .gnu.version_d,
    .gnu.hash) are each read as one block from the map and unpacked as arrays
    (struct.iter_unpack, array), so a 1 GB libtorch_cuda.so costs a few MB of
    memory and a fraction of a second. Not numpy: importing it alone takes
    longer than reading all of torch's symbol tables, and this module is shipped
    into build and test environments that hold little more than Python, torch
    and pyelftools (see faforge.abi.gate and the recipe's test section).

Every malformed input raises ElfError (exit code 2) naming the file and what
is wrong with it, pyelftools' own exceptions included; nothing here prints.
"""

from __future__ import annotations

import mmap
import struct
import sys
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.common.utils import struct_parse
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import StringTableSection

from faforge.errors import EXIT_BAD_INPUT, FaforgeError

# e_machine values, from the System V gABI registry (https://www.sco.com/developers/gabi/latest/ch4.eheader.html),
# named as `uname -m` does.
MACHINES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 62: "x86_64",
            183: "aarch64", 190: "cuda", 243: "riscv64", 258: "loongarch64"}

SHT_STRTAB = 3
SHT_DYNAMIC = 6
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHT_GNU_HASH = 0x6FFFFFF6
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
SHN_UNDEF = 0
# The .dynamic tags kept, as pyelftools names them, and the DynamicTag attribute holding each one's string.
DYNAMIC_STRINGS = {"DT_NEEDED": "needed", "DT_SONAME": "soname", "DT_RPATH": "rpath", "DT_RUNPATH": "runpath"}
# What pyelftools and the parsers under it raise on malformed input; each becomes an ElfError naming the file.
# (mmap raises ValueError/OverflowError for a seek past the end; AssertionError and IndexError come from
# pyelftools' own consistency checks.)
PARSE_ERRORS = (ELFError, struct.error, ValueError, OverflowError, IndexError, KeyError, AssertionError)
STB_WEAK = 2
EXPORTED_BINDINGS = (1, 2, 10)  # GLOBAL, WEAK, GNU_UNIQUE
EXPORTED_VISIBILITIES = (0, 3)  # DEFAULT, PROTECTED
VERSYM_HIDDEN = 0x8000
VER_FLG_BASE = 1


class ElfError(FaforgeError):
    """The file is missing, unreadable, not ELF, or malformed."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message, hint=hint or "pass the extension .so, its wheel or conda package, or the folder it is installed in")


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


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


@dataclass(frozen=True)
class VersionNeed:
    """One DT_VERNEED entry: versions this object requires from the library `file`."""

    file: str
    versions: tuple[str, ...]


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
        return Symbol(self.names[i], self.version_names.get(raw & ~VERSYM_HIDDEN), self.shndx[i] != SHN_UNDEF,
                      self.info[i] >> 4 == STB_WEAK, not raw & VERSYM_HIDDEN)

    def all_symbols(self) -> Iterator[Symbol]:
        return (self.symbol(i) for i in range(1, len(self.names)))

    def undefined(self) -> list[Symbol]:
        """Symbols this object imports (weak ones included; callers decide whether those matter)."""
        return [self.symbol(i) for i in range(1, len(self.names)) if self.shndx[i] == SHN_UNDEF and self.names[i]]

    def exports(self) -> dict[str, tuple[tuple[str | None, bool], ...]]:
        """Exported name -> its definitions as (version or None, hidden): defined symbols with global,
        weak or unique binding and default or protected visibility."""
        one = {raw: ((self.version_names.get(raw & ~VERSYM_HIDDEN), bool(raw & VERSYM_HIDDEN)),) for raw in set(self.versym)}
        rows = zip(self.names, self.info, self.other, self.shndx, self.versym)
        next(rows, None)  # the null symbol
        exported = [(name, raw) for name, info, other, shndx, raw in rows
                    if shndx != SHN_UNDEF and info >> 4 in EXPORTED_BINDINGS and other & 3 in EXPORTED_VISIBILITIES]
        table = {name: one[raw] for name, raw in exported}
        if len(table) < len(exported):  # some names are defined under several versions (libc's memcpy)
            table = {}
            for name, raw in exported:
                table[name] = table.get(name, ()) + one[raw]
        return table


NO_SYMBOLS = DynamicSymbols((), (), (), (), (), {}, (), ())


def gnu_hash(name: str) -> int:
    """The hash of the .gnu.hash table (dl_new_hash in glibc)."""
    h = 5381
    for byte in name.encode("latin-1"):
        h = (h * 33 + byte) & 0xFFFFFFFF
    return h


@dataclass(frozen=True, eq=False)
class HashedExports:
    """Exact-name lookups in a library's exports through its .gnu.hash table, as ld.so does them.

    Probing a few thousand names this way reads one bloom word, one bucket and a short
    chain each, instead of decoding every name of a 450 MB libtorch_cpu.so.
    """

    path: Path
    bloom: array
    bloom_bits: int  # 64 for ELFCLASS64, 32 for ELFCLASS32
    bloom_shift: int
    buckets: array
    chain: array  # hash values of symbols symoffset.., the low bit marks a chain's end
    symoffset: int
    dynsym: bytes
    row: struct.Struct  # st_name and the binding/visibility/section fields, see ElfFile.hashed_exports
    columns: tuple[int, int, int, int]
    dynstr: bytes
    versym: array
    version_names: dict[int, str]

    def might_define(self, hashes: list[int]) -> list[bool]:
        """The bloom filter for many hashes at once: False means certainly not exported here."""
        bloom, bits, shift, size = self.bloom, self.bloom_bits, self.bloom_shift, len(self.bloom)
        return [bool((bloom[(h // bits) % size] >> (h % bits)) & (bloom[(h // bits) % size] >> ((h >> shift) % bits)) & 1)
                for h in hashes]

    def lookup(self, name: str, hashed: int) -> tuple[tuple[str | None, bool], ...]:
        """The exported definitions of `name` as (version or None, hidden); `hashed` is gnu_hash(name)."""
        word = self.bloom[(hashed // self.bloom_bits) % len(self.bloom)]
        mask = (1 << (hashed % self.bloom_bits)) | (1 << ((hashed >> self.bloom_shift) % self.bloom_bits))
        if word & mask != mask or not self.buckets:
            return ()
        i = self.buckets[hashed % len(self.buckets)]
        if i < self.symoffset:
            return ()
        encoded, found = name.encode("latin-1"), []
        while i - self.symoffset < len(self.chain):
            value = self.chain[i - self.symoffset]
            if (value | 1) == (hashed | 1) and (definition := self._definition(i, encoded)):
                found.append(definition)
            if value & 1:
                return tuple(found)
            i += 1
        raise ElfError(f"{self.path}: malformed ELF: a .gnu.hash chain runs past the symbol table")

    def _definition(self, i: int, encoded: bytes) -> tuple[str | None, bool] | None:
        if (i + 1) * self.row.size > len(self.dynsym):
            raise ElfError(f"{self.path}: malformed ELF: .gnu.hash names symbol {i}, past .dynsym")
        fields = self.row.unpack_from(self.dynsym, i * self.row.size)
        st_name, info, other, shndx = (fields[c] for c in self.columns)
        end = st_name + len(encoded)
        if not (self.dynstr.startswith(encoded, st_name) and self.dynstr[end:end + 1] == b"\0"):
            return None
        if shndx == SHN_UNDEF or info >> 4 not in EXPORTED_BINDINGS or other & 3 not in EXPORTED_VISIBILITIES:
            return None
        raw = self.versym[i] if i < len(self.versym) else 0
        return self.version_names.get(raw & ~VERSYM_HIDDEN), bool(raw & VERSYM_HIDDEN)


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
            raise ElfError(f"{self.path}: truncated or malformed ELF: {what} lies outside the file "
                           f"(bytes {offset}..{offset + size} of {self.size})")

    def read(self, offset: int, size: int, what: str) -> bytes:
        self.check(offset, size, what)
        return self.map[offset:offset + size]

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

    def __exit__(self, *exc) -> None:
        self.image.close()

    def _read_header(self) -> None:
        ident = self.image.map[:16]
        if ident[:4] == b"\x7fELF" and len(ident) < 16:
            raise ElfError(f"{self.path}: truncated ELF file ({len(ident)} bytes)")
        if ident[:4] != b"\x7fELF":
            raise ElfError(f"{self.path}: not an ELF file (starts with {bytes(ident[:4])!r}); "
                           "expected a compiled extension module or shared library")
        with self._parsing("malformed ELF header"):
            self._pyelf = ELFFile(self.image.map)
            self.elf_class, self.little_endian = self._pyelf.elfclass, self._pyelf.little_endian
            self.file_type = _number(self._pyelf.structs.Elf_Ehdr, "e_type", self._pyelf["e_type"])
            machine = _number(self._pyelf.structs.Elf_Ehdr, "e_machine", self._pyelf["e_machine"])
        self.bo = "<" if self.little_endian else ">"
        self.machine = MACHINES.get(machine, f"EM_{machine}")
        if self.machine == "ppc64" and self.little_endian:
            self.machine = "ppc64le"
        with self._parsing("malformed section table"):
            self.sections = self._read_sections()

    @contextmanager
    def _parsing(self, what: str) -> Iterator[None]:
        """pyelftools' exceptions on malformed input, as ElfError naming this file."""
        try:
            yield
        except PARSE_ERRORS as exc:
            raise ElfError(f"{self.path}: {what}: {str(exc) or type(exc).__name__}") from None

    def _read_sections(self) -> list[Section]:
        """Section headers through pyelftools' Elf_Shdr layout, without building its section objects
        (see the module docstring)."""
        count, shoff, shentsize = self._pyelf.num_sections(), self._pyelf["e_shoff"], self._pyelf["e_shentsize"]
        if count == 0:
            return []
        layout = self._pyelf.structs.Elf_Shdr
        if shentsize < layout.sizeof():
            raise ElfError(f"{self.path}: malformed ELF: section header size {shentsize}, expected {layout.sizeof()}")
        self.image.check(shoff, count * shentsize, f"section table ({count} entries)")
        headers = [struct_parse(layout, self._pyelf.stream, shoff + i * shentsize) for i in range(count)]
        types = [_number(layout, "sh_type", h.sh_type) for h in headers]
        shstrndx, names = self._pyelf.get_shstrndx(), None
        if 0 < shstrndx < count and types[shstrndx] != SHT_NOBITS:
            names = StringTableSection(headers[shstrndx], "", self._pyelf)
            self.image.check(names["sh_offset"], names["sh_size"], "section name table")
        return [Section(names.get_string(h.sh_name) if names and h.sh_name < names["sh_size"] else "",
                        type_, h.sh_offset, h.sh_size, h.sh_link, h.sh_entsize)
                for h, type_ in zip(headers, types)]

    # -- sections -----------------------------------------------------------------------------

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
        return self.section_bytes(self.sections[self._link(section)])

    def _link(self, section: Section) -> int:
        if not 0 < section.link < len(self.sections):
            raise ElfError(f"{self.path}: malformed ELF: section {section.name} links to section {section.link}")
        return section.link

    def _rows(self, section: Section, fmt: str, what: str) -> list[tuple]:
        """A table section unpacked row by row (a partial last row is ignored)."""
        size = struct.calcsize(fmt)
        count = self._row_count(section, size, what)
        return list(struct.iter_unpack(self.bo + fmt, self.section_bytes(section)[:count * size]))

    def _row_count(self, section: Section, size: int, what: str) -> int:
        """How many whole rows of `size` bytes a table section holds, once its entry size and extent are checked."""
        if section.entsize not in (0, size):
            raise ElfError(f"{self.path}: malformed ELF: {what} entry size {section.entsize}, expected {size}")
        if section.type == SHT_NOBITS:
            return 0
        self.image.check(section.offset, section.size, f"section {section.name or section.type}")
        return section.size // size

    # -- dynamic section ----------------------------------------------------------------------

    def info(self) -> ElfInfo:
        entries: dict[str, list[str]] = {tag: [] for tag in DYNAMIC_STRINGS}
        index = next((i for i, s in enumerate(self.sections) if s.type == SHT_DYNAMIC), None)
        if index is not None:
            dynamic = self.sections[index]
            strings = self.sections[self._link(dynamic)]
            if strings.type != SHT_STRTAB:
                raise ElfError(f"{self.path}: malformed ELF: .dynamic links to section {dynamic.link}, not a string table")
            # Read no further than the section, whether or not a DT_NULL ends it (a corrupt one may not).
            count = self._row_count(dynamic, self._pyelf.structs.Elf_Dyn.sizeof(), ".dynamic")
            with self._parsing("malformed .dynamic"):
                for tag in islice(self._pyelf.get_section(index).iter_tags(), count):
                    if tag["d_tag"] in entries:
                        if tag["d_val"] >= strings.size:
                            raise ElfError(f"{self.path}: malformed ELF: .dynamic names string {tag['d_val']}, "
                                           f"past its table ({strings.size} bytes)")
                        entries[tag["d_tag"]].append(getattr(tag, DYNAMIC_STRINGS[tag["d_tag"]]))
        split = lambda tag: tuple(p for e in entries[tag] for p in e.split(":") if p)  # noqa: E731
        return ElfInfo(
            path=self.path, elf_class=self.elf_class, little_endian=self.little_endian, machine=self.machine,
            file_type=self.file_type, soname=(entries["DT_SONAME"] or [None])[0], needed=tuple(entries["DT_NEEDED"]),
            rpath=split("DT_RPATH"), runpath=split("DT_RUNPATH"),
        )

    def dynamic_symbols(self) -> DynamicSymbols:
        dynsym = self.section_by_type(SHT_DYNSYM)
        if dynsym is None:
            return NO_SYMBOLS
        fmt, columns = self._symbol_layout()
        rows = self._rows(dynsym, fmt, ".dynsym")
        if not rows:
            return NO_SYMBOLS
        table = list(zip(*rows))
        name_offsets, info, other, shndx = (table[c] for c in columns)
        needs, needed_names = self._version_needs()
        defines, defined_names = self.version_definitions()
        return DynamicSymbols(
            names=_names_at(self.linked_strings(dynsym), name_offsets, self.path), info=info, other=other,
            shndx=shndx, versym=tuple(self._versym(len(rows))), version_names={**defined_names, **needed_names},
            needs=needs, defines=defines,
        )

    def hashed_exports(self) -> HashedExports | None:
        """The .gnu.hash view of the exports, or None when the file has no .gnu.hash (then use
        dynamic_symbols().exports())."""
        table, dynsym = self.section_by_type(SHT_GNU_HASH), self.section_by_type(SHT_DYNSYM)
        if table is None or dynsym is None:
            return None
        data = self.section_bytes(table)
        if len(data) < 16:
            raise ElfError(f"{self.path}: malformed ELF: .gnu.hash is {len(data)} bytes")
        nbuckets, symoffset, bloom_size, bloom_shift = struct.unpack_from(self.bo + "IIII", data)
        word = 8 if self.elf_class == 64 else 4
        chain_at = 16 + bloom_size * word + nbuckets * 4
        if bloom_size == 0 or chain_at > len(data):
            raise ElfError(f"{self.path}: malformed ELF: .gnu.hash declares {bloom_size} bloom words and "
                           f"{nbuckets} buckets in {len(data)} bytes")
        bloom = self._array("Q" if word == 8 else "I", data[16:16 + bloom_size * word])
        buckets = self._array("I", data[16 + bloom_size * word:chain_at])
        chain = self._array("I", data[chain_at:len(data) - (len(data) - chain_at) % 4])
        fmt, columns = self._symbol_layout()
        raw = self.section_bytes(dynsym)
        _, defined_names = self.version_definitions()
        return HashedExports(
            path=self.path, bloom=bloom, bloom_bits=word * 8, bloom_shift=bloom_shift, buckets=buckets, chain=chain,
            symoffset=symoffset, dynsym=raw, row=struct.Struct(self.bo + fmt), columns=columns,
            dynstr=self.linked_strings(dynsym), versym=self._versym(len(raw) // struct.calcsize(fmt)),
            version_names=defined_names,
        )

    def _symbol_layout(self) -> tuple[str, tuple[int, int, int, int]]:
        """The struct format of one .dynsym entry and where st_name, st_info, st_other, st_shndx sit in it."""
        if self.elf_class == 64:
            return "IBBHQQ", (0, 1, 2, 3)  # name, info, other, shndx, value, size
        return "IIIBBH", (0, 3, 4, 5)  # name, value, size, info, other, shndx

    def _array(self, typecode: str, data: bytes) -> array:
        values = array(typecode, data)
        if self.little_endian != (sys.byteorder == "little"):
            values.byteswap()
        return values

    def _versym(self, count: int) -> array:
        section = self.section_by_type(SHT_GNU_VERSYM)
        data = self.section_bytes(section) if section is not None else b""
        versym = self._array("H", data[:min(len(data) // 2, count) * 2])
        versym.extend([0] * (count - len(versym)))
        return versym

    def _version_needs(self) -> tuple[tuple[VersionNeed, ...], dict[int, str]]:
        section = self.section_by_type(SHT_GNU_VERNEED)
        if section is None:
            return (), {}
        data, strings, seen = self.section_bytes(section), self.linked_strings(section), set()
        needs, index = [], {}
        for at, (_version, count, file_off, aux, _next) in self._chain(data, "HHIII", section.name, seen):
            versions = []
            for _, (_hash, _flags, other, name_off, _n) in self._chain(data, "IHHII", section.name, seen, at + aux, count):
                name = _c_string(strings, name_off, self.path, section.name)
                index[other & ~VERSYM_HIDDEN] = name
                versions.append(name)
            needs.append(VersionNeed(_c_string(strings, file_off, self.path, section.name), tuple(versions)))
        return tuple(needs), index

    def version_definitions(self) -> tuple[tuple[str, ...], dict[int, str]]:
        """The versions this file defines (without its base entry) and their .gnu.version indexes."""
        section = self.section_by_type(SHT_GNU_VERDEF)
        if section is None:
            return (), {}
        data, strings = self.section_bytes(section), self.linked_strings(section)
        defines, index = [], {}
        for at, (_version, flags, ndx, _count, _hash, aux, _next) in self._chain(data, "HHHHIII", section.name, set()):
            name_off = self._unpack(data, at + aux, "I", section.name)[0]
            name = _c_string(strings, name_off, self.path, section.name)
            if not flags & VER_FLG_BASE:
                index[ndx] = name
                defines.append(name)
        return tuple(defines), index

    def _chain(self, data: bytes, fmt: str, what: str, seen: set[int], start: int = 0, limit: int | None = None):
        """Walk a version linked list, yielding (offset, record); each record's last field is the
        distance to the next one (0 ends the list). A record visited twice means a corrupt file,
        which also bounds the walk by the section's size."""
        offset, count = start, 0
        while True:
            if offset in seen:
                raise ElfError(f"{self.path}: malformed ELF: {what} links back to the record at {offset}")
            seen.add(offset)
            record = self._unpack(data, offset, fmt, what)
            yield offset, record
            count += 1
            if record[-1] == 0 or (limit is not None and count >= limit):
                return
            offset += record[-1]

    def _unpack(self, data: bytes, offset: int, fmt: str, what: str) -> tuple:
        size = struct.calcsize(fmt)
        if offset < 0 or offset + size > len(data):
            raise ElfError(f"{self.path}: malformed ELF: {what} entry at {offset} runs past the section")
        return struct.unpack_from(self.bo + fmt, data, offset)


def _number(layout, field: str, value: int | str) -> int:
    """The number of an enum field that pyelftools decoded to its name ("SHT_DYNSYM", "EM_X86_64"),
    through the field's own mapping in pyelftools' struct layout; values it has no name for stay numbers."""
    if isinstance(value, int):
        return value
    return next(c for c in layout.subcons if c.name == field).encoding[value]


def _c_string(strings: bytes, offset: int, path: Path, what: str) -> str:
    if offset >= len(strings):
        raise ElfError(f"{path}: malformed ELF: {what} names string {offset}, past its table ({len(strings)} bytes)")
    end = strings.find(b"\0", offset)
    return strings[offset:end if end >= 0 else len(strings)].decode("latin-1")


def _names_at(strings: bytes, offsets: tuple[int, ...], path: Path) -> tuple[str, ...]:
    """The C string at each offset of a string table (faster than splitting the table, measured)."""
    if offsets and max(offsets) >= max(len(strings), 1):
        raise ElfError(f"{path}: malformed ELF: a .dynsym name lies past .dynstr ({len(strings)} bytes)")
    text = strings.decode("latin-1") + "\0"
    find = text.find
    return tuple(text[o:find("\0", o)] for o in offsets)


def read_info(path: str | Path) -> ElfInfo:
    """Header, DT_NEEDED, SONAME, RPATH and RUNPATH of one ELF file."""
    with ElfFile(path) as elf:
        return elf.info()


def read_dynamic_symbols(path: str | Path) -> DynamicSymbols:
    """The dynamic symbol table of one ELF file, with symbol versions resolved to names."""
    with ElfFile(path) as elf:
        return elf.dynamic_symbols()


def read_elf(path: str | Path) -> tuple[ElfInfo, DynamicSymbols]:
    """Both of the above with one open."""
    with ElfFile(path) as elf:
        return elf.info(), elf.dynamic_symbols()
