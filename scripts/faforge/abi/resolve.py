"""Find the libraries an extension loads and the library that provides each symbol.

Mirrors glibc's dynamic linker closely enough to agree with `dlopen(RTLD_NOW)`:
DT_NEEDED is followed breadth first; a name already loaded (by SONAME or by the
name it was needed under) is reused; a candidate file for another machine or
ELF class is skipped, as ld.so does; a symbol reference binds to the first
library in load order that exports it under a matching version.

The search order puts the torch being checked first: the --against
directories, then the needing object's DT_RPATH/DT_RUNPATH ($ORIGIN expanded),
then the system's default path (/etc/ld.so.conf and the built-in directories).
"""

from __future__ import annotations

import functools
import glob
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from faforge.abi.elf import DynamicSymbols, ElfError, ElfFile, ElfInfo, HashedExports, gnu_hash, read_dynamic_symbols, read_info
from faforge.errors import FaforgeError

# Libraries that belong to torch itself: missing one is an error, not "unverified".
TORCH_LIBRARY = re.compile(r"^lib(c10|torch)[^/]*\.so")
LD_SO_CONF = Path("/etc/ld.so.conf")
# glibc's built-in trusted directories, searched after ld.so.conf's.
BUILTIN_DIRS = ("/lib64", "/usr/lib64", "/lib", "/usr/lib")


def is_torch_library(name: str) -> bool:
    return bool(TORCH_LIBRARY.match(Path(name).name))


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


def torch_lib_dirs(against: str | Path) -> tuple[Path, ...]:
    """The folders holding torch's shared libraries inside DIR.

    DIR may be a torch/lib folder, a site-packages, a Python prefix (venv) or a
    conda prefix (libtorch puts its libraries in PREFIX/lib).
    """
    root = Path(against)
    if not root.is_dir():
        raise FaforgeError(f"--against {against}: {'no such directory' if not root.exists() else 'not a directory'}; "
                           "pass a torch/lib folder, a site-packages or an environment prefix")
    candidates = [root, root / "torch" / "lib", root / "lib",
                  *sorted(root.glob("lib/python3*/site-packages/torch/lib")),
                  *sorted(root.glob("lib64/python3*/site-packages/torch/lib"))]
    found = [d for d in candidates if d.is_dir() and any(is_torch_library(p.name) for p in d.glob("lib*.so*"))]
    if not found:
        raise FaforgeError(f"--against {against}: no torch libraries (libc10*.so, libtorch*.so) in it, its torch/lib, "
                           "lib/ or lib/python3*/site-packages/torch/lib; pass the folder of an environment with torch")
    return tuple(dict.fromkeys(d.resolve() for d in found))


@dataclass(frozen=True)
class Library:
    """A library found for a DT_NEEDED entry; its tables are read on first use."""

    name: str  # the DT_NEEDED name it was loaded under
    path: Path
    info: ElfInfo
    needed_by: str

    @cached_property
    def symbols(self) -> DynamicSymbols:
        """The whole symbol table (only needed to explain a missing symbol)."""
        return read_dynamic_symbols(self.path)

    @cached_property
    def exports(self) -> dict[str, tuple[tuple[str | None, bool], ...]]:
        return self.symbols.exports()

    @cached_property
    def export_text(self) -> str:
        """All exported names, one per line, for fast substring searches."""
        return "\n".join(self.exports)

    @cached_property
    def defines(self) -> tuple[str, ...]:
        """The symbol versions this library defines (GLIBC_2.28, ...)."""
        with ElfFile(self.path) as elf:
            return elf.version_definitions()[0]

    @cached_property
    def _hashed(self) -> HashedExports | None:
        with ElfFile(self.path) as elf:
            return elf.hashed_exports()

    def might_define(self, hashes: list[int]) -> list[bool]:
        """A cheap first filter for many names (by elf.gnu_hash): False means certainly not here."""
        if self._hashed is not None:
            return self._hashed.might_define(hashes)
        return [True] * len(hashes)

    def definitions(self, name: str, hashed: int) -> tuple[tuple[str | None, bool], ...]:
        """Exported definitions of `name` as (version, hidden); `hashed` is elf.gnu_hash(name)."""
        if self._hashed is not None:
            return self._hashed.lookup(name, hashed)
        return self.exports.get(name, ())  # no .gnu.hash (old DT_HASH-only linkers): read the whole table

    def provides(self, name: str, version: str | None, hashed: int | None = None) -> bool:
        """Whether a reference to name (@version) binds here, by glibc's check_match rules."""
        for defined, hidden in self.definitions(name, gnu_hash(name) if hashed is None else hashed):
            if version is None and not hidden:
                return True
            if version is not None and (defined == version or (defined is None and not hidden)):
                return True
        return False


@dataclass(frozen=True)
class NotFound:
    name: str
    needed_by: str
    wrong_machine: tuple[Path, ...]  # files with that name that were skipped: built for another machine

    @property
    def is_torch(self) -> bool:
        return is_torch_library(self.name)


@dataclass(frozen=True)
class Closure:
    """Everything an object loads, in ld.so's load order, plus what could not be found."""

    root: ElfInfo
    libraries: tuple[Library, ...]
    not_found: tuple[NotFound, ...]

    def provider(self, name: str, version: str | None) -> Library | None:
        return self.providers([(name, version)])[0]

    def providers(self, refs: Sequence[tuple[str, str | None]]) -> list[Library | None]:
        """The library each (name, version) reference binds to, None when none exports it.

        Libraries are visited in load order with all still-unresolved names at once, so
        their bloom filters are probed in one tight loop each.
        """
        hashes = [gnu_hash(name) for name, _ in refs]
        found: list[Library | None] = [None] * len(refs)
        pending = list(range(len(refs)))
        for library in self.libraries:
            if not pending:
                break
            maybe = library.might_define([hashes[i] for i in pending])
            still = []
            for i, candidate in zip(pending, maybe):
                if candidate and library.provides(*refs[i], hashes[i]):
                    found[i] = library
                else:
                    still.append(i)
            pending = still
        return found

    def library_named(self, needed: str) -> Library | None:
        return next((lib for lib in self.libraries if needed in (lib.name, lib.info.soname)), None)


def load_closure(root: ElfInfo, search_dirs: Sequence[Path]) -> Closure:
    """Follow DT_NEEDED from `root` breadth first, looking in search_dirs before anything else."""
    libraries: list[Library] = []
    not_found: list[NotFound] = []
    loaded: dict[str, Library] = {}
    missing: set[str] = set()
    queue: deque[tuple[ElfInfo, str]] = deque((root, name) for name in root.needed)
    while queue:
        needer, name = queue.popleft()
        if name in loaded or name in missing:
            continue
        found, wrong = _find(name, needer, root, search_dirs)
        if found is None:
            missing.add(name)
            not_found.append(NotFound(name, needer.path.name, tuple(wrong)))
            continue
        path, info = found
        library = Library(name, path, info, needer.path.name)
        libraries.append(library)
        loaded[name] = library
        if info.soname:
            loaded.setdefault(info.soname, library)
        queue.extend((info, dep) for dep in info.needed)
    return Closure(root, tuple(libraries), tuple(not_found))


def _find(name: str, needer: ElfInfo, root: ElfInfo, search_dirs: Sequence[Path]):
    """(path, info) of the first compatible file for a DT_NEEDED name, and the incompatible ones seen."""
    if "/" in name:
        candidates = [Path(name) if name.startswith("/") else needer.path.parent / name]
    else:
        own = needer.runpath or needer.rpath
        dirs = [*search_dirs, *(_expand(d, needer) for d in own), *system_library_dirs()]
        candidates = [Path(d) / name for d in dict.fromkeys(dirs) if d is not None]
    wrong = []
    for candidate in candidates:
        try:
            if not candidate.is_file():
                continue
            info = read_info(candidate)
        except (ElfError, OSError):  # ld.so skips files it cannot use and keeps searching
            continue
        if info.abi_key == root.abi_key:
            return (candidate, info), wrong
        wrong.append(candidate)
    return None, wrong


def _expand(entry: str, needer: ElfInfo) -> str | None:
    """$ORIGIN/${ORIGIN} -> the needing object's folder; entries with other tokens are skipped."""
    expanded = entry.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", str(needer.path.parent))
    return None if "$" in expanded else expanded
