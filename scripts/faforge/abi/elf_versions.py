"""Symbol versions: .gnu.version, .gnu.version_r (what a file needs) and .gnu.version_d (what it defines).

Apart from the symbol table because a library's defined versions are asked on their own (which
GLIBC_2.x a libc offers) and the linked lists here need their own loop guards.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faforge.abi.elf_file import ElfError, ElfFile

SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
VERSYM_HIDDEN = 0x8000
VER_FLG_BASE = 1


@dataclass(frozen=True)
class VersionNeed:
    """One DT_VERNEED entry: versions this object requires from the library `file`."""

    file: str
    versions: tuple[str, ...]


def versym(elf: ElfFile, count: int) -> array:
    """The .gnu.version entry of each of `count` symbols (0, unversioned, where the table is short or absent)."""
    section = elf.section_by_type(SHT_GNU_VERSYM)
    data = elf.section_bytes(section) if section is not None else b""
    values = elf.as_array("H", data[: min(len(data) // 2, count) * 2])
    values.extend([0] * (count - len(values)))
    return values


def version_needs(elf: ElfFile) -> tuple[tuple[VersionNeed, ...], dict[int, str]]:
    """The versions this file requires, per library, and their .gnu.version indexes."""
    section = elf.section_by_type(SHT_GNU_VERNEED)
    if section is None:
        return (), {}
    data, strings = elf.section_bytes(section), elf.linked_strings(section)
    seen: set[int] = set()
    needs, index = [], {}
    for at, (_version, count, file_off, aux, _next) in _chain(elf, data, "HHIII", section.name, seen):
        versions = []
        for _, (_hash, _flags, other, name_off, _n) in _chain(elf, data, "IHHII", section.name, seen, at + aux, count):
            name = _c_string(strings, name_off, elf.path, section.name)
            index[other & ~VERSYM_HIDDEN] = name
            versions.append(name)
        needs.append(VersionNeed(_c_string(strings, file_off, elf.path, section.name), tuple(versions)))
    return tuple(needs), index


def version_definitions(elf: ElfFile) -> tuple[tuple[str, ...], dict[int, str]]:
    """The versions this file defines (without its base entry) and their .gnu.version indexes."""
    section = elf.section_by_type(SHT_GNU_VERDEF)
    if section is None:
        return (), {}
    data, strings = elf.section_bytes(section), elf.linked_strings(section)
    defines, index = [], {}
    for at, (_version, flags, ndx, _count, _hash, aux, _next) in _chain(elf, data, "HHHHIII", section.name, set()):
        name_off = _unpack(elf, data, at + aux, "I", section.name)[0]
        name = _c_string(strings, name_off, elf.path, section.name)
        if not flags & VER_FLG_BASE:
            index[ndx] = name
            defines.append(name)
    return tuple(defines), index


def _chain(
    elf: ElfFile, data: bytes, fmt: str, what: str, seen: set[int], start: int = 0, limit: int | None = None
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Walk a version linked list, yielding (offset, record); each record's last field is the
    distance to the next one (0 ends the list). A record visited twice means a corrupt file,
    which also bounds the walk by the section's size."""
    offset, count = start, 0
    while True:
        if offset in seen:
            raise ElfError(f"{elf.path}: malformed ELF: {what} links back to the record at {offset}")
        seen.add(offset)
        record = _unpack(elf, data, offset, fmt, what)
        yield offset, record
        count += 1
        if record[-1] == 0 or (limit is not None and count >= limit):
            return
        offset += record[-1]


def _unpack(elf: ElfFile, data: bytes, offset: int, fmt: str, what: str) -> tuple[Any, ...]:
    size = struct.calcsize(fmt)
    if offset < 0 or offset + size > len(data):
        raise ElfError(f"{elf.path}: malformed ELF: {what} entry at {offset} runs past the section")
    return struct.unpack_from(elf.bo + fmt, data, offset)


def _c_string(strings: bytes, offset: int, path: Path, what: str) -> str:
    if offset >= len(strings):
        raise ElfError(f"{path}: malformed ELF: {what} names string {offset}, past its table ({len(strings)} bytes)")
    end = strings.find(b"\0", offset)
    return strings[offset : end if end >= 0 else len(strings)].decode("latin-1")
