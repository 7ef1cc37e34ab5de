"""GPU architectures embedded in an ELF file's CUDA fatbinary, read without CUDA tools.

nvcc puts one fatbin container per translation unit into the `.nv_fatbin`
section; the linker concatenates them (8-byte aligned).  A container is a
16-byte header followed by entries, each with its own header that names the
kind (SASS cubin or PTX), the SM number and flags; only those headers are read,
never the (often compressed) payloads, so even libtorch_cuda.so takes well
under a second.

The layout is not documented by NVIDIA.  Field offsets follow the community
description in https://github.com/n-eiling/cuda-fatbin-decompression
(fatbin-decompress.h, `fat_elf_header`/`fat_text_header`); the meaning of the
arch-variant flag bits was measured here with nvcc 13.0 and checked against
`cuobjdump` (PyPI nvidia-cuda-cuobjdump) in tests/abi/test_fatbin.py.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf_file import ElfError, ElfFile

SECTION = ".nv_fatbin"
CONTAINER_MAGIC = 0xBA55ED50
CONTAINER_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries that follow
# kind, version, header size, padded payload size, compressed size, (unknown), minor, major, arch, name offset,
# name length, flags; 56 of an entry header's 64+ bytes.
ENTRY_HEADER = struct.Struct("<HHIQIIHHIIIQ")
KIND_PTX, KIND_SASS = 1, 2
# Flag bits that turn sm_XY into an architecture- or family-specific variant (measured, see module docstring).
VARIANT_FLAGS = {0x100000: "a", 0x200000: "f"}


@dataclass(frozen=True)
class GpuArchs:
    """What a binary can run on: SASS (machine code per SM) and PTX (JIT-compiled for newer GPUs)."""

    sass: tuple[str, ...]  # ("sm_80", "sm_90a")
    ptx: tuple[str, ...]  # ("compute_90",)

    def __bool__(self) -> bool:
        return bool(self.sass or self.ptx)


def combined(parts: list[GpuArchs]) -> GpuArchs:
    """The GPU code of a module and the libraries it carries, as one list."""
    sass = {a for part in parts for a in part.sass}
    ptx = {a for part in parts for a in part.ptx}
    return GpuArchs(tuple(sorted(sass, key=_arch_order)), tuple(sorted(ptx, key=_arch_order)))


def read_gpu_archs(path: str | Path) -> GpuArchs:
    """The SASS and PTX architectures in `path`'s .nv_fatbin section (empty for a CPU-only file)."""
    with ElfFile(path) as elf:
        section = elf.section_by_name(SECTION)
        if section is None:
            return GpuArchs((), ())
        sass: set[str] = set()
        ptx: set[str] = set()
        for kind, name in _entries(elf, section.offset, section.size):
            (sass if kind == KIND_SASS else ptx).add(name)
    return GpuArchs(tuple(sorted(sass, key=_arch_order)), tuple(sorted(ptx, key=_arch_order)))


def _entries(elf: ElfFile, start: int, size: int) -> Iterator[tuple[int, str]]:
    """(kind, arch name) of every entry of every container in the section."""
    end = start + size
    magic = struct.pack("<I", CONTAINER_MAGIC)
    pos = elf.image.map.find(magic, start, end)
    while pos >= 0:
        _, _, header_size, entries_size = CONTAINER_HEADER.unpack(
            elf.image.read(pos, CONTAINER_HEADER.size, "fatbin header")
        )
        entry, container_end = pos + header_size, pos + header_size + entries_size
        if header_size < CONTAINER_HEADER.size or container_end > end:
            raise ElfError(f"{elf.path}: malformed {SECTION}: container at {pos - start} runs past the section")
        while entry < container_end:
            fields = ENTRY_HEADER.unpack(elf.image.read(entry, ENTRY_HEADER.size, "fatbin entry header"))
            kind, entry_header, payload, arch, flags = fields[0], fields[2], fields[3], fields[8], fields[11]
            if entry_header < ENTRY_HEADER.size or entry + entry_header + payload > container_end:
                raise ElfError(f"{elf.path}: malformed {SECTION}: entry at {entry - start} runs past its container")
            if kind in (KIND_PTX, KIND_SASS):
                suffix = "".join(s for bit, s in VARIANT_FLAGS.items() if flags & bit)
                yield kind, f"{'sm' if kind == KIND_SASS else 'compute'}_{arch}{suffix}"
            entry += entry_header + payload
        pos = elf.image.map.find(magic, container_end, end)


def _arch_order(name: str) -> tuple[int, str]:
    number = name.split("_", 1)[1]
    digits = number.rstrip("af")
    return (int(digits), number[len(digits) :])
