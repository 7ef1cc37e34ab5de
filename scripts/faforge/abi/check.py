"""Check extension modules against a torch: read (elf, fatbin) -> resolve -> the loader's refusals (load_problems)
-> classify -> report."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.abi import classify, layout
from faforge.abi.elf import read_dynamic_symbols, read_elf, read_info
from faforge.abi.elf_file import ElfError
from faforge.abi.elf_symbols import DynamicSymbols
from faforge.abi.fatbin import combined, read_gpu_archs
from faforge.abi.inputs import package_binaries
from faforge.abi.ld_search import beside_module, system_library_dirs
from faforge.abi.library import Library
from faforge.abi.load_problems import import_problems, library_problems
from faforge.abi.platforms import SUBDIR_MACHINE as PLATFORM_MACHINES
from faforge.abi.report import Declared, LoadedLibrary, ModuleVerdict, Problem, TorchFacts, Verdict
from faforge.abi.resolve import (
    Closure,
    environment_dirs,
    is_torch_library,
    load_closure,
    loaded_by_torch,
    opened,
    torch_lib_dirs,
)
from faforge.errors import FaforgeError

if TYPE_CHECKING:
    from faforge.abi.elf import ElfInfo
    from faforge.abi.resolve import TorchLoad

ET_DYN = 3
_TORCH_VERSION = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)", re.MULTILINE)
_TORCH_CUDA = re.compile(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)", re.MULTILINE)


def parse_glibc(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    if not re.fullmatch(r"\d+\.\d+", text):
        raise FaforgeError(
            f"--glibc {text!r}: expected a glibc version", hint="e.g. --glibc 2.28 (the target sysroot's)"
        )
    return tuple(int(x) for x in text.split("."))


def check_path(
    path: str | Path,
    against: Sequence[str | Path],
    *,
    glibc: str | None = None,
    platform: str | None = None,
    library_dirs: Sequence[Path] = (),
    dating: layout.Dating | None = None,
) -> Verdict:
    """Check what the package in `path` (a .so, wheel, conda package or folder) loads with the torch found
    in the `against` folders (faforge.abi.inputs: its extension modules and torch.ops libraries, of a
    per-torch set the member it picks for that torch); `library_dirs` hold its other libraries, searched after the
    torch environment's (a split flash-attn's libflash_attn_kernels.so, in its kernel package's lib/)."""
    limit = parse_glibc(glibc)
    if platform is not None and platform not in PLATFORM_MACHINES:
        raise FaforgeError(f"--platform {platform!r}: expected one of {', '.join(PLATFORM_MACHINES)}")
    if not against:
        raise FaforgeError(
            "no --against folder: pass the torch/lib, site-packages or prefix of the torch to check against"
        )
    lib_dirs = tuple(dict.fromkeys(d for a in against for d in torch_lib_dirs(a)))
    torch = torch_facts(lib_dirs)
    search_dirs = tuple(dict.fromkeys([*environment_dirs(lib_dirs), *(opened(d) for d in library_dirs)]))
    with package_binaries(path, torch) as found:
        verdicts = tuple(
            replace(
                check_module(
                    b.path,
                    search_dirs,
                    shown_as=b.shown,
                    torch=torch,
                    glibc=limit,
                    machine=PLATFORM_MACHINES.get(platform or ""),
                    dating=dating,
                ),
                loaded_by=b.loaded_by,
            )
            for b in found.binaries
        )
    return Verdict(
        extension=str(path),
        against=tuple(str(a) for a in against),
        torch=torch,
        modules=verdicts,
        glibc=glibc,
        platform=platform,
        sets=tuple(found.sets),
    )


def torch_facts(lib_dirs: Sequence[Path]) -> TorchFacts:
    """Version, CUDA, machine and C++ ABI of the torch whose libraries are in lib_dirs.

    The C++ ABI comes from how torch's own exported API spells std::string (classify.torch_cxx11_abi),
    read from libc10.so first: the smallest library, and one every torch has.
    """
    libs = [p for d in lib_dirs for p in d.glob("lib*.so*") if is_torch_library(p.name) and p.is_file()]
    machine = abi = None
    torch_dirs = tuple(dict.fromkeys(p.parent for p in libs))
    for lib in sorted(libs, key=lambda p: (not p.name.startswith("libc10.so"), p.stat().st_size)):
        try:
            machine = machine or read_info(lib).machine
            abi = classify.torch_cxx11_abi(read_dynamic_symbols(lib).exports())
        except ElfError:
            continue
        if abi is not None:
            break
    version = cuda = None
    for d in lib_dirs:
        for version_py in [d.parent / "version.py", *d.glob("python3*/site-packages/torch/version.py")]:
            if version_py.is_file():
                text = version_py.read_text(errors="replace")
                version = (m := _TORCH_VERSION.search(text)) and m.group(1)
                cuda = (m := _TORCH_CUDA.search(text)) and m.group(1)
                break
        if version:
            break
    return TorchFacts(tuple(str(d) for d in torch_dirs or lib_dirs), version or None, cuda or None, machine, abi)


def check_module(
    path: Path,
    search_dirs: Sequence[Path],
    *,
    shown_as: str,
    torch: TorchFacts,
    glibc: tuple[int, ...] | None = None,
    machine: str | None = None,
    dating: layout.Dating | None = None,
) -> ModuleVerdict:
    """The verdict for one extension module, loaded as `import` loads it: after torch's libraries."""
    info, symbols = read_elf(path)
    if info.file_type != ET_DYN:
        raise ElfError(f"{path}: ELF type {info.file_type} is not a shared library; pass a built extension (.so)")
    required = [v for need in symbols.needs for v in need.versions]
    declared = Declared(
        machine=info.machine,
        elf_class=info.elf_class,
        cxx11_abi=classify.cxx11_abi_of(symbols.names),
        gpu=read_gpu_archs(path),
        newest_versions=classify.newest_versions(required),
    )
    arch_problems = _architecture_problems(info.machine, machine, torch)
    if arch_problems:  # every symbol would be unresolved; the architecture is the whole story
        return ModuleVerdict(shown_as, declared, (), tuple(arch_problems), (), 0, 0)

    torch_load = loaded_by_torch(search_dirs)
    closure, beside = _load_as_the_package_does(info, path, search_dirs, torch_load)
    # A split build's kernels live in a library the module itself needs (libflash_attn_kernels.so,
    # the kernel library), not in the module: its GPU code is the module's and that of its direct needs that
    # torch did not load.
    own_needs = [lib.path for lib in closure.libraries if lib.needed_by == path.name]
    declared = replace(declared, gpu=combined([declared.gpu, *(read_gpu_archs(p) for p in own_needs)]))
    problems, unverified = library_problems(torch_load, closure, search_dirs)

    # ld.so relocates every object this load brings in, not only the module: a helper found through
    # the module's RUNPATH ($ORIGIN/lib) or --library-dir that imports a symbol the torch lacks
    # fails the load. Torch's own libraries, what `import torch` loaded already and the
    # system's libraries are not checked again.
    found, interpreter, unresolved_unverified = import_problems(symbols, closure, glibc)
    problems += [replace(p, imported_by=shown_as) for p in found]
    helpers = _helpers(closure, search_dirs, torch_load.libraries)
    for helper, helper_symbols in helpers:
        found, _, maybe_unfound = import_problems(helper_symbols, closure, glibc)
        problems += [replace(p, imported_by=helper) for p in found]
        unresolved_unverified += maybe_unfound
    # Every symbol may resolve and the load still crash: a type handed to torch whose layout changed.
    objects = [
        (shown_as, symbols, path),
        *((helper, helper_symbols, Path(helper)) for helper, helper_symbols in helpers),
    ]
    broken, untold = layout.judge(objects, closure, dating=dating)
    problems += broken
    libraries = tuple(
        LoadedLibrary(lib.name, str(lib.path), beside_module=id(lib) in beside) for lib in closure.libraries
    )
    return ModuleVerdict(
        shown_as,
        declared,
        libraries,
        tuple(problems),
        tuple(unverified),
        interpreter,
        unresolved_unverified,
        untold=tuple(untold),
    )


def _load_as_the_package_does(
    info: ElfInfo, path: Path, search_dirs: Sequence[Path], torch_load: TorchLoad
) -> tuple[Closure, set[int]]:
    """The module's closure after `import torch`, with the libraries its package loads itself first.

    A NEEDED library that the loader finds nowhere (no RUNPATH, not on the search path) but that
    lies beside the module or in its package's lib/ is one the package loads itself before the module
    (torchaudio's libtorchaudio.so, torchtext's lib/libtorchtext.so: ctypes.CDLL of the path, then the
    import, whose DT_NEEDED binds to it by name). It is taken as loaded first, as ld.so reuses an
    object already loaded under that name, and checked like every library of the load; the ids of
    those taken are returned, so the report can say where each came from.
    """
    taken: dict[str, Library] = {}
    while True:
        closure = load_closure(info, search_dirs, {**torch_load.libraries, **taken})
        new = {}
        for nf in closure.not_found:
            found = None if nf.misplaced or nf.is_required else beside_module(nf.name, path, info)
            if found is not None:
                new[nf.name] = Library(nf.name, found[0], found[1], nf.needed_by)
        if not new:
            return closure, {id(lib) for lib in taken.values()}
        for name, library in new.items():
            taken[name] = library
            if library.info.soname:
                taken.setdefault(library.info.soname, library)


def _helpers(
    closure: Closure, search_dirs: Sequence[Path], torch_loaded: Mapping[str, Library]
) -> list[tuple[str, DynamicSymbols]]:
    """The libraries this load brings in besides the module whose imports ld.so binds now: not
    torch's (checked against each other when torch was built), not loaded by `import torch` already,
    not the system's (the distribution's, consistent by construction)."""
    system = set(system_library_dirs()) - set(search_dirs)
    loaded = {id(lib) for lib in torch_loaded.values()}
    return [
        (str(lib.path), lib.symbols)
        for lib in closure.libraries
        if id(lib) not in loaded and not is_torch_library(lib.name) and lib.path.parent not in system
    ]


def _architecture_problems(binary: str, target: str | None, torch: TorchFacts) -> list[Problem]:
    problems = []
    if target and binary != target:
        problems.append(
            Problem(
                classify.WRONG_ARCHITECTURE,
                None,
                None,
                None,
                f"the binary is built for {binary}, but the target platform runs {target}",
            )
        )
    if torch.machine and binary != torch.machine:
        problems.append(
            Problem(
                classify.WRONG_ARCHITECTURE,
                None,
                None,
                torch.lib_dirs[0],
                f"the binary is built for {binary}, but the torch libraries are {torch.machine}",
            )
        )
    return problems
