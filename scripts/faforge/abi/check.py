"""Check extension modules against a torch: read (elf, fatbin) -> resolve -> classify -> report."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.abi import classify, layout
from faforge.abi.demangle import demangle
from faforge.abi.elf import read_dynamic_symbols, read_elf, read_info
from faforge.abi.elf_file import ElfError
from faforge.abi.elf_symbols import DynamicSymbols, Symbol
from faforge.abi.fatbin import combined, read_gpu_archs
from faforge.abi.inputs import package_binaries
from faforge.abi.ld_search import beside_module, system_library_dirs
from faforge.abi.library import Library
from faforge.abi.report import Declared, LoadedLibrary, ModuleVerdict, Problem, TorchFacts, Unverified, Verdict
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
    from faforge.abi.elf_versions import VersionNeed
    from faforge.abi.ld_search import Misplaced
    from faforge.abi.resolve import TorchLoad

ET_DYN = 3
# conda subdir -> ELF machine as faforge.abi.elf names it.
PLATFORM_MACHINES = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "linux-ppc64le": "ppc64le"}
# Symbols the Python interpreter that imports the module provides (extensions do not link libpython).
INTERPRETER_SYMBOL = re.compile(r"^_?Py")
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
    problems: list[Problem] = []
    unverified: list[Unverified] = []
    torch_owned = {lib.path.name for lib in torch_load.libraries.values()}
    # A library found only by reading a $ORIGIN entry's `..` lexically fails the load for certain,
    # whether `import torch` or the module needs it (faforge.abi.ld_search's Misplaced).
    misplaced = {
        (nf.name, nf.misplaced.needer): (nf.name, nf.misplaced)
        for nf in (*torch_load.not_found, *closure.not_found)
        if nf.misplaced
    }
    problems += [
        Problem(classify.MISSING_LIBRARY, None, None, name, _misplaced_detail(name, m), misplaced=m)
        for name, m in misplaced.values()
    ]
    for nf in closure.not_found:
        if nf.misplaced:
            continue
        where = (
            f"not loaded by torch, and not in {', '.join(map(str, search_dirs))}, "
            "the needing library's RUNPATH or the system library path"
        )
        if nf.wrong_machine:
            where = f"only built for another machine: {', '.join(map(str, nf.wrong_machine))}"
        if nf.is_required:
            what = "torch library" if nf.is_torch else "CUDA runtime"
            problems.append(
                Problem(
                    classify.MISSING_LIBRARY,
                    None,
                    None,
                    nf.name,
                    f"{what} {nf.name} (needed by {nf.needed_by}) is {where}",
                )
            )
        else:
            unverified.append(
                Unverified(
                    nf.name,
                    nf.needed_by,
                    f"{where}; its symbols were not checked",
                    by_torch=nf.needed_by in torch_owned,
                )
            )

    # ld.so relocates every object this load brings in, not only the module: a helper found through
    # the module's RUNPATH ($ORIGIN/lib) or --library-dir that imports a symbol the torch lacks
    # fails the load. Torch's own libraries, what `import torch` loaded already and the
    # system's libraries are not checked again.
    found, interpreter, unresolved_unverified = _import_problems(symbols, closure, glibc)
    problems += [replace(p, imported_by=shown_as) for p in found]
    helpers = _helpers(closure, search_dirs, torch_load.libraries)
    for helper, helper_symbols in helpers:
        found, _, maybe_unfound = _import_problems(helper_symbols, closure, glibc)
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


def _misplaced_detail(name: str, m: Misplaced) -> str:
    through = (
        f"{m.link} is a symlink to a folder ({m.link.resolve()})"
        if m.link
        else "its folder is reached through a symlink"
    )
    return (
        f"{name} (needed by {m.needer}) is not where the loader looks: {through}, and the kernel resolves `..` "
        f"in its {m.tag} entry {m.entry} physically, from where the link points, so the loader looks in "
        f"{m.looked_in}, not in {m.lies_in} where {name} is; link the files, not the directory "
        "(uv --link-mode symlink does this), or copy them"
    )


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


def _import_problems(
    symbols: DynamicSymbols, closure: Closure, glibc: tuple[int, ...] | None
) -> tuple[list[Problem], int, int]:
    """(problems, symbols left to the interpreter, unresolved symbols an unfound library may provide)
    for one object's imports, bound in the closure's load order as ld.so binds them."""
    problems: list[Problem] = []
    imports = symbols.undefined()
    failed_versions = _version_problems(symbols.needs, closure, glibc, problems, imports)
    wanted = [sym for sym in imports if not sym.weak and sym.version not in failed_versions]
    interpreter = sum(1 for sym in wanted if INTERPRETER_SYMBOL.match(sym.name))
    wanted = [sym for sym in wanted if not INTERPRETER_SYMBOL.match(sym.name)]
    providers = closure.providers([(sym.name, sym.version) for sym in wanted])
    unresolved = [sym for sym, provider in zip(wanted, providers, strict=True) if provider is None]
    unresolved_unverified = 0
    for sym, problem in zip(unresolved, _explain(unresolved, closure, symbols), strict=True):
        if (problem.kind == classify.MISSING_SYMBOL and _may_come_from_unfound(sym, problem, closure, symbols)) or (
            problem.kind == classify.SIGNATURE_DRIFT and _owner_unfound(sym, symbols, closure)
        ):
            unresolved_unverified += 1
        else:
            problems.append(problem)
    return problems, interpreter, unresolved_unverified


def _may_come_from_unfound(sym: Symbol, problem: Problem, closure: Closure, symbols: DynamicSymbols) -> bool:
    """Whether an unresolved symbol could be provided by a library that was not found: then it
    is unverified, never called missing.

    A symbol whose name says where it comes from is a problem when that library was found and
    lacks it, whatever else is missing: a versioned one (GLIBC_2.28, GLIBCXX_3.4.29: DT_VERNEED
    names its library) and one of torch's own (c10::, at::, torch::, caffe2::).
    """
    if not closure.not_found:
        return False
    if sym.version is not None:
        owner = next((need.file for need in symbols.needs if sym.version in need.versions), None)
        return owner is None or closure.library_named(owner) is None
    if classify.is_torch_api(problem.demangled):
        return any(nf.is_torch for nf in closure.not_found)
    return True


def _owner_unfound(sym: Symbol, symbols: DynamicSymbols, closure: Closure) -> bool:
    """Whether a versioned import's own library (DT_VERNEED names it: GLIBCXX_3.4 -> libstdc++.so.6) was
    not found. Then a same-name export of torch with other parameters is no signature drift: ld.so binds
    the import to its own library, which this check could not read (seen in the cross build: an aarch64 glue checked
    without the target's libstdc++ had std::runtime_error's constructors called drift against
    libtorch_python.so, which exports the move constructor)."""
    owner = next((need.file for need in symbols.needs if sym.version in need.versions), None) if sym.version else None
    return owner is not None and closure.library_named(owner) is None


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


def _version_problems(
    needs: Sequence[VersionNeed],
    closure: Closure,
    glibc: tuple[int, ...] | None,
    problems: list[Problem],
    imports: list[Symbol],
) -> set[str]:
    """Check DT_VERNEED as ld.so does at load time, and GLIBC_ versions against --glibc."""
    failed: set[str] = set()
    for need in needs:
        library = closure.library_named(need.file)
        if library is None:
            continue
        for version in need.versions:
            if version in library.defines:
                continue
            failed.add(version)
            parsed = classify.parse_version(version)
            kind = (
                classify.GLIBC_TOO_NEW
                if parsed and parsed[0] in classify.RUNTIME_VERSION_PREFIXES
                else classify.MISSING_SYMBOL
            )
            newest = classify.newest_versions(library.defines).get(parsed[0]) if parsed else None
            problems.append(
                Problem(
                    kind,
                    version,
                    None,
                    need.file,
                    f"needs {version} from {need.file} ({_users(imports, version)}), but "
                    f"{library.path} provides {'up to ' + newest if newest else 'no such version'}",
                )
            )
    if glibc is not None:
        for version in classify.glibc_above([v for need in needs for v in need.versions], glibc):
            if version not in failed:
                failed.add(version)
                problems.append(
                    Problem(
                        classify.GLIBC_TOO_NEW,
                        version,
                        None,
                        "libc.so.6",
                        f"needs {version} ({_users(imports, version)}), newer than the target "
                        f"glibc {'.'.join(map(str, glibc))}",
                    )
                )
    return failed


def _users(imports: list[Symbol], version: str, shown: int = 3) -> str:
    names = sorted({s.name for s in imports if s.version == version})
    if not names:
        return "no symbol uses it, but ld.so checks every listed version"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return "used by " + ", ".join(names[:shown]) + more


def _explain(unresolved: list[Symbol], closure: Closure, symbols: DynamicSymbols) -> list[Problem]:
    """Classify each unresolved symbol, searching the libraries once per distinct search key."""
    hints: dict[str | None, str] = {v: need.file for need in symbols.needs for v in need.versions}
    by_key: dict[str | None, list[tuple[str, str]]] = {}
    problems = []
    for sym in unresolved:
        wanted = demangle(sym.name)
        key = classify.search_key(classify.parse_signature(wanted).qualified_name) if wanted else None
        if key is not None and key not in by_key:
            by_key[key] = [
                (name, lib.name)
                for lib in closure.libraries
                for name in classify.lines_containing(lib.export_text, key).values()
            ]
        problems.append(classify.explain_missing(sym.name, hints.get(sym.version), by_key.get(key, ())))
    return problems
