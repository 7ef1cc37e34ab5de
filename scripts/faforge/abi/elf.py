"""Read what the dynamic linker reads from an ELF file, and nothing else.

Only the ELF header, the section table and the dynamic sections (.dynamic,
.dynsym, .dynstr, .gnu.version, .gnu.version_r, .gnu.version_d) are read, each
as one block from a memory map and unpacked as a table (struct.iter_unpack),
so a 1 GB libtorch_cuda.so costs a few MB of memory and a fraction of a second.
Only the standard library is used, not pyelftools or numpy: this module is
shipped into build and test environments that hold little more than Python and
torch (see faforge.abi.gate), and importing numpy alone would take longer than
reading all of torch's symbol tables.

Every malformed input raises ElfError (exit code 2) naming the file and what
is wrong with it; nothing here prints.
"""

from __future__ import annotations

import mmap
import struct
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import EXIT_BAD_INPUT, FaforgeError

# e_machine values, from the System V gABI registry (https://www.sco.com/developers/gabi/latest/ch4.eheader.html),
# named as `uname -m` does.
MACHINES = {3: "i386", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390x", 40: "arm", 62: "x86_64",
            183: "aarch64", 190: "cuda", 243: "riscv64", 258: "loongarch64"}

SHT_DYNAMIC = 6
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHT_GNU_HASH = 0x6FFFFFF6
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
SHN_UNDEF = 0
SHN_XINDEX = 0xFFFF
DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 14, 15, 29
STB_WEAK = 2
EXPORTED_BINDINGS = (1, 2, 10)  # GLOBAL, WEAK, GNU_UNIQUE
EXPORTED_VISIBILITIES = (0, 3)  # DEFAULT, PROTECTED
VERSYM_HIDDEN = 0x8000
VER_FLG_BASE = 1


class ElfError(FaforgeError):
    """The file is missing, unreadable, not ELF, or malformed."""

    exit_code = EXIT_BAD_INPUT


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

    def read(self, offset: int, size: int, what: str) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ElfError(f"{self.path}: truncated or malformed ELF: {what} lies outside the file "
                           f"(bytes {offset}..{offset + size} of {self.size})")
        return self.map[offset:offset + size]

    def close(self) -> None:
        self.map.close()


class ElfFile:
    """An open ELF file; use as a context manager. Parses the header and section table on open."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.image = _Image(self.path)
        try:
            self._parse_header()
        except BaseException:
            self.image.close()
            raise

    def __enter__(self) -> ElfFile:
        return self

    def __exit__(self, *exc) -> None:
        self.image.close()

    def _parse_header(self) -> None:
        ident = self.image.map[:16]
        if ident[:4] == b"\x7fELF" and len(ident) < 16:
            raise ElfError(f"{self.path}: truncated ELF file ({len(ident)} bytes)")
        if ident[:4] != b"\x7fELF":
            raise ElfError(f"{self.path}: not an ELF file (starts with {bytes(ident[:4])!r}); "
                           "expected a compiled extension module or shared library")
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ElfError(f"{self.path}: malformed ELF header (class {ident[4]}, data encoding {ident[5]})")
        self.elf_class = 32 if ident[4] == 1 else 64
        self.little_endian = ident[5] == 1
        self.bo = "<" if self.little_endian else ">"
        fields = "HHIIIIIHHHHHH" if self.elf_class == 32 else "HHIQQQIHHHHHH"
        header = struct.unpack(self.bo + fields, self.image.read(16, struct.calcsize(fields), "ELF header"))
        self.file_type, machine = header[0], header[1]
        self.machine = MACHINES.get(machine, f"EM_{machine}")
        if self.machine == "ppc64" and self.little_endian:
            self.machine = "ppc64le"
        self.e_flags = header[6]
        shoff, shentsize, shnum, shstrndx = header[5], header[10], header[11], header[12]
        self.sections = self._parse_sections(shoff, shentsize, shnum, shstrndx)

    def _parse_sections(self, shoff: int, shentsize: int, shnum: int, shstrndx: int) -> list[Section]:
        if shoff == 0:
            return []
        fmt = self.bo + ("IIIIIIIIII" if self.elf_class == 32 else "IIQQQQIIQQ")
        if shentsize != struct.calcsize(fmt):
            raise ElfError(f"{self.path}: malformed ELF: section header size {shentsize}, expected {struct.calcsize(fmt)}")
        first = struct.unpack(fmt, self.image.read(shoff, shentsize, "section header 0"))
        if shnum == 0:  # more than 0xff00 sections: the count lives in section 0
            shnum = first[5]
        if shstrndx == SHN_XINDEX:
            shstrndx = first[6]
        raw = self.image.read(shoff, shnum * shentsize, f"section table ({shnum} entries)")
        rows = list(struct.iter_unpack(fmt, raw))
        names = b""
        if 0 < shstrndx < len(rows) and rows[shstrndx][1] != SHT_NOBITS:
            names = self.image.read(rows[shstrndx][4], rows[shstrndx][5], "section name table")
        sections = []
        for name_off, type_, _flags, _addr, offset, size, link, _info, _align, entsize in rows:
            end = names.find(b"\0", name_off)
            name = names[name_off:end if end >= 0 else len(names)].decode("latin-1") if name_off < len(names) else ""
            sections.append(Section(name, type_, offset, size, link, entsize))
        return sections

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
        if not 0 < section.link < len(self.sections):
            raise ElfError(f"{self.path}: malformed ELF: section {section.name} links to section {section.link}")
        return self.section_bytes(self.sections[section.link])

    def _rows(self, section: Section, fmt: str, what: str) -> list[tuple]:
        """A table section unpacked row by row (a partial last row is ignored)."""
        size = struct.calcsize(fmt)
        if section.entsize not in (0, size):
            raise ElfError(f"{self.path}: malformed ELF: {what} entry size {section.entsize}, expected {size}")
        data = self.section_bytes(section)
        return list(struct.iter_unpack(self.bo + fmt, data[:len(data) - len(data) % size]))

    # -- dynamic section ----------------------------------------------------------------------

    def info(self) -> ElfInfo:
        entries: dict[int, list[str]] = {DT_NEEDED: [], DT_SONAME: [], DT_RPATH: [], DT_RUNPATH: []}
        dynamic = self.section_by_type(SHT_DYNAMIC)
        if dynamic is not None:
            strings = self.linked_strings(dynamic)
            for tag, val in self._rows(dynamic, "iI" if self.elf_class == 32 else "qQ", ".dynamic"):
                if tag == 0:
                    break
                if tag in entries:
                    entries[tag].append(_c_string(strings, val, self.path, ".dynamic"))
        split = lambda tag: tuple(p for e in entries[tag] for p in e.split(":") if p)  # noqa: E731
        return ElfInfo(
            path=self.path, elf_class=self.elf_class, little_endian=self.little_endian, machine=self.machine,
            file_type=self.file_type, soname=(entries[DT_SONAME] or [None])[0], needed=tuple(entries[DT_NEEDED]),
            rpath=split(DT_RPATH), runpath=split(DT_RUNPATH),
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
