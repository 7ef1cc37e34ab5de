"""Exact-name lookups through a library's .gnu.hash table, as ld.so does them.

Apart from the symbol table because resolving an extension's imports probes a few thousand
names in each of torch's libraries, and this way costs a bloom word, a bucket and a short
chain per name instead of decoding every name of a 450 MB libtorch_cpu.so.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf_file import ElfError, ElfFile
from faforge.abi.elf_symbols import EXPORTED_BINDINGS, EXPORTED_VISIBILITIES, SHN_UNDEF, SHT_DYNSYM, symbol_layout
from faforge.abi.elf_versions import VERSYM_HIDDEN, version_definitions, versym

SHT_GNU_HASH = 0x6FFFFFF6


def gnu_hash(name: str) -> int:
    """The hash of the .gnu.hash table (dl_new_hash in glibc)."""
    h = 5381
    for byte in name.encode("latin-1"):
        h = (h * 33 + byte) & 0xFFFFFFFF
    return h


@dataclass(frozen=True, eq=False)
class HashedExports:
    """Exact-name lookups in a library's exports through its .gnu.hash table."""

    path: Path
    bloom: array
    bloom_bits: int  # 64 for ELFCLASS64, 32 for ELFCLASS32
    bloom_shift: int
    buckets: array
    chain: array  # hash values of symbols symoffset.., the low bit marks a chain's end
    symoffset: int
    dynsym: bytes
    row: struct.Struct  # st_name and the binding/visibility/section fields, see hashed_exports
    columns: tuple[int, int, int, int]
    dynstr: bytes
    versym: array
    version_names: dict[int, str]

    def might_define(self, hashes: list[int]) -> list[bool]:
        """The bloom filter for many hashes at once: False means certainly not exported here."""
        bloom, bits, shift, size = self.bloom, self.bloom_bits, self.bloom_shift, len(self.bloom)
        return [
            bool((bloom[(h // bits) % size] >> (h % bits)) & (bloom[(h // bits) % size] >> ((h >> shift) % bits)) & 1)
            for h in hashes
        ]

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
        if not (self.dynstr.startswith(encoded, st_name) and self.dynstr[end : end + 1] == b"\0"):
            return None
        if shndx == SHN_UNDEF or info >> 4 not in EXPORTED_BINDINGS or other & 3 not in EXPORTED_VISIBILITIES:
            return None
        raw = self.versym[i] if i < len(self.versym) else 0
        return self.version_names.get(raw & ~VERSYM_HIDDEN), bool(raw & VERSYM_HIDDEN)


def hashed_exports(elf: ElfFile) -> HashedExports | None:
    """The .gnu.hash view of an open file's exports, or None when it has no .gnu.hash (then use
    elf_symbols.dynamic_symbols(elf).exports())."""
    table, dynsym = elf.section_by_type(SHT_GNU_HASH), elf.section_by_type(SHT_DYNSYM)
    if table is None or dynsym is None:
        return None
    data = elf.section_bytes(table)
    if len(data) < 16:
        raise ElfError(f"{elf.path}: malformed ELF: .gnu.hash is {len(data)} bytes")
    nbuckets, symoffset, bloom_size, bloom_shift = struct.unpack_from(elf.bo + "IIII", data)
    word = 8 if elf.elf_class == 64 else 4
    chain_at = 16 + bloom_size * word + nbuckets * 4
    if bloom_size == 0 or chain_at > len(data):
        raise ElfError(
            f"{elf.path}: malformed ELF: .gnu.hash declares {bloom_size} bloom words and "
            f"{nbuckets} buckets in {len(data)} bytes"
        )
    bloom = elf.as_array("Q" if word == 8 else "I", data[16 : 16 + bloom_size * word])
    buckets = elf.as_array("I", data[16 + bloom_size * word : chain_at])
    chain = elf.as_array("I", data[chain_at : len(data) - (len(data) - chain_at) % 4])
    fmt, columns = symbol_layout(elf)
    raw = elf.section_bytes(dynsym)
    _, defined_names = version_definitions(elf)
    return HashedExports(
        path=elf.path,
        bloom=bloom,
        bloom_bits=word * 8,
        bloom_shift=bloom_shift,
        buckets=buckets,
        chain=chain,
        symoffset=symoffset,
        dynsym=raw,
        row=struct.Struct(elf.bo + fmt),
        columns=columns,
        dynstr=elf.linked_strings(dynsym),
        versym=versym(elf, len(raw) // struct.calcsize(fmt)),
        version_names=defined_names,
    )
