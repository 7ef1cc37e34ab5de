"""How ld.so finds one DT_NEEDED name: the search order, /etc/ld.so.conf, $ORIGIN, and the
candidate files it skips.

$ORIGIN is the folder a library was opened in, symlinks kept (glibc's l_origin is
the path it opened, not its realpath), and the kernel resolves a `..` after it
physically, from where a symlinked folder points. So a library opened in a folder
that is a symlink into a store does not find `$ORIGIN/../X` beside the link
(torch's `$ORIGIN/../../nvidia/*/lib` with torch/lib linked as a whole): a needed
library found only by reading `..` lexically is `Misplaced`, a definite failure,
not an unfound library.

DT_RPATH is inherited, DT_RUNPATH is not: for a needer without RUNPATH, glibc searches its RPATH and
then the RPATH of the object that loaded it, and of that object's loader, up the chain (elf/dl-load.c,
_dl_map_object: `for (l = loader; l; l = l->l_loader)`; an object with a RUNPATH adds no RPATH). PyPI's
aarch64 torch relies on it: torch.libs/libopenblasp-r0-*.so has no RPATH and needs
libgfortran-*.so.5.0.0 beside it, found through libtorch_cpu.so's `$ORIGIN/../../torch.libs`.
"""

from __future__ import annotations

import functools
import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf import ElfInfo, read_info
from faforge.abi.elf_file import ElfError

LD_SO_CONF = Path("/etc/ld.so.conf")
# glibc's built-in trusted directories, searched after ld.so.conf's.
BUILTIN_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


@functools.cache
def system_library_dirs(conf: Path = LD_SO_CONF) -> tuple[Path, ...]:
    """The directories ld.so searches by default on this machine, in order."""
    dirs: list[str] = []
    _read_ld_so_conf(conf, dirs, seen=set())
    dirs += BUILTIN_DIRS
    return tuple(dict.fromkeys(Path(d) for d in dirs if Path(d).is_dir()))


def _read_ld_so_conf(conf: Path, dirs: list[str], seen: set[Path]) -> None:
    if conf in seen or not conf.is_file():
        return
    seen.add(conf)
    for line in conf.read_text(errors="replace").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include "):
            pattern = line.split(None, 1)[1]
            pattern = pattern if pattern.startswith("/") else str(conf.parent / pattern)
            for included in sorted(glob.glob(pattern)):
                _read_ld_so_conf(Path(included), dirs, seen)
        elif line.startswith("/"):
            dirs.append(line)


@dataclass(frozen=True)
class Misplaced:
    """Where a needed library is when `..` in a $ORIGIN entry is read lexically, and where the
    loader looks instead: the needer's folder is reached through a symlink to a folder elsewhere."""

    needer: Path  # the library that needs it, as opened
    entry: str  # its RUNPATH/RPATH entry, as written
    tag: str  # "RUNPATH" or "RPATH"
    looked_in: Path  # the entry with `..` resolved physically, as the kernel does
    lies_in: Path  # the entry with `..` resolved lexically, where the library is
    link: Path | None  # the symlinked folder the needer was opened through


def find_needed(
    name: str, needer: ElfInfo, root: ElfInfo, search_dirs: Sequence[Path], loaders: Sequence[ElfInfo] = ()
) -> tuple[tuple[Path, ElfInfo] | None, list[Path]]:
    """(path, info) of the first compatible file for a DT_NEEDED name, and the incompatible ones seen.

    `loaders`: the chain of objects that loaded `needer`, nearest first, whose RPATHs it inherits."""
    if "/" in name:
        candidates = [Path(name) if name.startswith("/") else needer.path.parent / name]
    else:
        dirs = [
            *search_dirs,
            *(_expand(d, obj) for obj in own_search_path(needer, loaders) for d in obj.runpath or obj.rpath),
            *system_library_dirs(),
        ]
        candidates = [Path(d) / name for d in dict.fromkeys(dirs) if d is not None]
    wrong: list[Path] = []
    for candidate in candidates:
        info = _elf_info(candidate)
        if info is None:
            continue
        if info.abi_key == root.abi_key:
            return (candidate, info), wrong
        wrong.append(candidate)
    return None, wrong


def package_folders(module: Path) -> list[Path]:
    """Where a package keeps the libraries it loads itself: the module's folder, and the lib/ of that
    folder and of each Python package folder above it (torchtext/_torchtext.so: torchtext/lib/)."""
    folders, folder = [module.parent, module.parent / "lib"], module.parent
    while (folder / "__init__.py").is_file() and (folder.parent / "__init__.py").is_file():
        folder = folder.parent
        folders.append(folder / "lib")
    return list(dict.fromkeys(folders))


def beside_module(name: str, module: Path, root: ElfInfo) -> tuple[Path, ElfInfo] | None:
    """A library for `name` that no search path finds but that the module's package holds (package_folders)."""
    if "/" in name:
        return None
    for folder in package_folders(module):
        info = _elf_info(folder / name)
        if info is not None and info.abi_key == root.abi_key:
            return folder / name, info
    return None


def own_search_path(needer: ElfInfo, loaders: Sequence[ElfInfo]) -> list[ElfInfo]:
    """The objects whose RUNPATH or RPATH entries find the needer's libraries, in search order: the
    needer's RUNPATH alone, or its RPATH and those of its loaders that have no RUNPATH."""
    if needer.runpath:
        return [needer]
    return [obj for obj in (needer, *loaders) if not obj.runpath]


def _elf_info(candidate: Path) -> ElfInfo | None:
    """The candidate's ELF header, None where ld.so would skip it (no file, not ELF, unreadable).

    The open resolves `..` physically, as the kernel does for the loader."""
    try:
        return read_info(candidate) if candidate.is_file() else None
    except (ElfError, OSError):
        return None


def misplaced(name: str, needer: ElfInfo, root: ElfInfo) -> Misplaced | None:
    """Where an unfound `name` is when a $ORIGIN entry's `..` is read lexically, if the kernel's
    physical `..` leads elsewhere (the needer was opened through a symlinked folder)."""
    if "/" in name:
        return None
    for entry in needer.runpath or needer.rpath:
        expanded = _expand(entry, needer)
        if expanded is None or "ORIGIN" not in entry or ".." not in entry.split("/"):
            continue
        lexical, physical = Path(os.path.normpath(expanded)), Path(os.path.realpath(expanded))
        if physical == lexical.resolve():
            continue
        info = _elf_info(lexical / name)
        if info is not None and info.abi_key == root.abi_key:
            origin = needer.path.parent
            link = next((folder for folder in (origin, *origin.parents) if folder.is_symlink()), None)
            return Misplaced(needer.path, entry, "RUNPATH" if needer.runpath else "RPATH", physical, lexical, link)
    return None


def _expand(entry: str, needer: ElfInfo) -> str | None:
    """$ORIGIN/${ORIGIN} -> the needing object's folder, as opened; entries with other tokens are skipped."""
    expanded = entry.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", str(needer.path.parent))
    return None if "$" in expanded else expanded
