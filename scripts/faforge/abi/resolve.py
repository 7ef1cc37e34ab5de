"""Find the libraries an extension loads and the library that provides each symbol.

Mirrors glibc's dynamic linker closely enough to agree with `dlopen(RTLD_NOW)`:
DT_NEEDED is followed breadth first; a name already loaded (by SONAME or by the
name it was needed under) is reused; a candidate file for another machine or
ELF class is skipped, as ld.so does; a symbol reference binds to the first
library in load order that exports it under a matching version.

An extension is loaded after `import torch`, which has already loaded torch's
libraries and, through their RUNPATH, pip's nvidia/*/lib CUDA libraries. ld.so
reuses a library already loaded under the needed name or SONAME before it
searches, so an extension's own `libcudart.so.12` binds to the one torch
loaded. The closure models that: `loaded_by_torch` walks torch's
libraries first, and `load_closure` takes what they loaded before searching.
The search order puts the torch being checked first: the environment's folders
(`environment_dirs`: torch/lib, nvidia/*/lib, the prefix's lib/), then the
needing object's DT_RPATH/DT_RUNPATH ($ORIGIN expanded), then the system's
default path (/etc/ld.so.conf and the built-in directories).

How one name is searched for is faforge.abi.ld_search (with the `Misplaced` case of a
symlinked folder); binding a reference to one library is faforge.abi.library.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf import ElfInfo, read_info
from faforge.abi.elf_file import ElfError
from faforge.abi.elf_hash import gnu_hash
from faforge.abi.ld_search import Misplaced, find_needed, misplaced
from faforge.abi.library import Library
from faforge.errors import FaforgeError

# Libraries that belong to torch itself (libc10.so, libc10_cuda.so, libtorch.so, libtorch_cpu.so,
# libtorch_cuda.so, libtorch_python.so, ...): missing one is an error, not "unverified". Not
# libtorchaudio.so or libtorchvision.so, which ship beside other extensions.
TORCH_LIBRARY = re.compile(r"^lib(?:c10|torch)(?:_[A-Za-z0-9_]+)?\.so(?:\.[0-9.]+)?$")
# The CUDA runtime: when it really is missing (not in the environment, not loaded by torch), that is
# a finding of its own, not a reason to leave symbols unchecked.
CUDA_RUNTIME = re.compile(r"^libcudart\.so(?:\.[0-9.]+)?$")
# Who loads torch's libraries before the extension.
IMPORT_TORCH = "import torch"


def is_torch_library(name: str) -> bool:
    return bool(TORCH_LIBRARY.match(Path(name).name))


def is_required_library(name: str) -> bool:
    """Libraries whose absence is a problem: torch's own and the CUDA runtime."""
    base = Path(name).name
    return bool(TORCH_LIBRARY.match(base) or CUDA_RUNTIME.match(base))


def opened(path: str | Path) -> Path:
    """The path as the loader opens it: absolute, symlinks kept, since $ORIGIN is its folder."""
    return Path(os.path.abspath(path))


def torch_lib_dirs(against: str | Path) -> tuple[Path, ...]:
    """The folders holding torch's shared libraries inside DIR.

    DIR may be a torch/lib folder, a site-packages, a Python prefix (venv) or a
    conda prefix (libtorch puts its libraries in PREFIX/lib).
    """
    root = Path(against)
    if not root.is_dir():
        raise FaforgeError(
            f"--against {against}: {'no such directory' if not root.exists() else 'not a directory'}",
            hint="pass a torch/lib folder, a site-packages or an environment prefix",
        )
    candidates = [
        root,
        root / "torch" / "lib",
        root / "lib",
        *sorted(root.glob("lib/python3*/site-packages/torch/lib")),
        *sorted(root.glob("lib64/python3*/site-packages/torch/lib")),
    ]
    found = [d for d in candidates if d.is_dir() and any(is_torch_library(p.name) for p in d.glob("lib*.so*"))]
    if not found:
        raise FaforgeError(
            f"--against {against}: no torch libraries (libc10*.so, libtorch*.so) in it, its torch/lib, "
            "lib/ or lib/python3*/site-packages/torch/lib",
            hint="pass the folder of an environment with torch",
        )
    unique: dict[Path, Path] = {}
    for folder in found:
        unique.setdefault(folder.resolve(), opened(folder))
    return tuple(unique.values())


def environment_dirs(torch_dirs: Sequence[Path]) -> tuple[Path, ...]:
    """The folders a pip or conda environment's loader finds libraries in, torch's first.

    For each torch/lib folder (kept as opened: its libraries' $ORIGIN): pip's CUDA libraries
    in its site-packages' nvidia/*/lib (torch's RUNPATH $ORIGIN/../../nvidia points there,
    `..` resolved physically, so from where torch/lib really is) and the environment prefix's
    lib/ (site-packages is PREFIX/lib/python3.X/site-packages); a conda libtorch folder is
    PREFIX/lib itself.
    """
    dirs: list[Path] = []
    for torch_dir in torch_dirs:
        dirs.append(opened(torch_dir))
        physical = torch_dir.resolve()
        if physical.name == "lib" and physical.parent.name == "torch":
            site = physical.parent.parent
            beside = sorted(site.glob("nvidia/*/lib")) + sorted(site.glob("nvidia/*/lib64"))
            if site.parent.name.startswith("python3") and site.parent.parent.name in ("lib", "lib64"):
                beside.append(site.parent.parent)
            dirs += [d.resolve() for d in beside]
    return tuple(dict.fromkeys(d for d in dirs if d.is_dir()))


@dataclass(frozen=True)
class NotFound:
    name: str
    needed_by: str
    wrong_machine: tuple[Path, ...]  # files with that name that were skipped: built for another machine
    misplaced: Misplaced | None = None  # found only by a lexical `..`: the load fails for certain

    @property
    def is_torch(self) -> bool:
        return is_torch_library(self.name)

    @property
    def is_required(self) -> bool:
        return is_required_library(self.name)


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
            for i, candidate in zip(pending, maybe, strict=True):
                if candidate and library.provides(*refs[i], hashes[i]):
                    found[i] = library
                else:
                    still.append(i)
            pending = still
        return found

    def library_named(self, needed: str) -> Library | None:
        return next((lib for lib in self.libraries if needed in (lib.name, lib.info.soname)), None)


def load_closure(root: ElfInfo, search_dirs: Sequence[Path], loaded: Mapping[str, Library] | None = None) -> Closure:
    """Follow DT_NEEDED from `root` breadth first, reusing what is `loaded` already (by needed name
    or SONAME, as ld.so does) and otherwise looking in search_dirs before anything else."""
    libraries, not_found = _walk([(root, name, ()) for name in root.needed], root, search_dirs, dict(loaded or {}))
    return Closure(root, tuple(libraries), tuple(not_found))


@dataclass(frozen=True)
class TorchLoad:
    """What `import torch` has loaded, by needed name and SONAME, and what its libraries needed
    but the search did not find."""

    libraries: dict[str, Library]
    not_found: tuple[NotFound, ...]


def loaded_by_torch(search_dirs: Sequence[Path]) -> TorchLoad:
    """What `import torch` has loaded before an extension: torch's own libraries in search_dirs and
    their DT_NEEDED closure (found through their RUNPATH)."""
    roots: list[Library] = []
    for folder in search_dirs:
        for path in sorted(folder.glob("lib*.so*")):
            if not is_torch_library(path.name) or not path.is_file():
                continue
            try:
                roots.append(Library(path.name, path, read_info(path), IMPORT_TORCH))
            except ElfError:  # ld.so would not load it either
                continue
    if not roots:
        return TorchLoad({}, ())
    names = _names(roots)
    found, not_found = _walk(
        [(lib.info, name, ()) for lib in roots for name in lib.info.needed],
        roots[0].info,
        search_dirs,
        dict(names),
        reuse_roots=False,
    )
    return TorchLoad({**names, **_names(found)}, tuple(not_found))


def _names(libraries: Sequence[Library]) -> dict[str, Library]:
    names: dict[str, Library] = {}
    for library in libraries:
        names.setdefault(library.name, library)
        if library.info.soname:
            names.setdefault(library.info.soname, library)
    return names


def _walk(
    queue_items: Iterable[tuple[ElfInfo, str, tuple[ElfInfo, ...]]],
    root: ElfInfo,
    search_dirs: Sequence[Path],
    loaded: dict[str, Library],
    *,
    reuse_roots: bool = True,
) -> tuple[list[Library], list[NotFound]]:
    """The breadth-first DT_NEEDED walk behind load_closure and loaded_by_torch.

    With reuse_roots, a library taken from `loaded` joins this closure (it is in the new
    object's search scope); without, `loaded` only marks what needs no second visit. Each queued
    name carries its needer's loader chain (nearest first), whose RPATHs the needer inherits.
    """
    libraries: list[Library] = []
    taken: set[int] = set()  # id() of each library in `libraries`
    not_found: list[NotFound] = []
    seen: set[str] = set() if reuse_roots else set(loaded)
    missing: set[str] = set()
    queue: deque[tuple[ElfInfo, str, tuple[ElfInfo, ...]]] = deque(queue_items)
    while queue:
        needer, name, loaders = queue.popleft()
        if name in seen or name in missing:
            continue
        library = loaded.get(name)
        if library is None:
            found, wrong = find_needed(name, needer, root, search_dirs, loaders)
            if found is None:
                missing.add(name)
                not_found.append(NotFound(name, needer.path.name, tuple(wrong), misplaced(name, needer, root)))
                continue
            path, info = found
            library = Library(name, path, info, needer.path.name)
            loaded[name] = library
            if info.soname:
                loaded.setdefault(info.soname, library)
        seen.add(name)
        if id(library) in taken:
            continue
        taken.add(id(library))
        libraries.append(library)
        seen.update(n for n in (name, library.name, library.info.soname) if n)
        queue.extend((library.info, dep, (needer, *loaders)) for dep in library.info.needed)
    return libraries, not_found
