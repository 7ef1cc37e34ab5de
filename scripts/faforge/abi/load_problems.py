"""What ld.so refuses in one load: a NEEDED library it cannot find, a version DT_VERNEED asks that its library
lacks, a symbol nothing provides.

faforge.abi.check builds the load (the module after `import torch`, the libraries it brings in) and turns it into
a verdict; this module holds the loader's own rules for one load, each failure a Problem whose kind
faforge.abi.classify names, and what an unfound library might provide left unverified rather than called missing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.abi import classify
from faforge.abi.demangle import demangle
from faforge.abi.report import Problem, Unverified
from faforge.abi.signature import parse_signature, search_key

if TYPE_CHECKING:
    from faforge.abi.elf_symbols import DynamicSymbols, Symbol
    from faforge.abi.elf_versions import VersionNeed
    from faforge.abi.ld_search import Misplaced
    from faforge.abi.resolve import Closure, TorchLoad


# Symbols the Python interpreter that imports the module provides (extensions do not link libpython).
INTERPRETER_SYMBOL = re.compile(r"^_?Py")


def import_problems(
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
        key = search_key(parse_signature(wanted).qualified_name) if wanted else None
        if key is not None and key not in by_key:
            by_key[key] = [
                (name, lib.name)
                for lib in closure.libraries
                for name in classify.lines_containing(lib.export_text, key).values()
            ]
        problems.append(classify.explain_missing(sym.name, hints.get(sym.version), by_key.get(key, ())))
    return problems


def library_problems(
    torch_load: TorchLoad, closure: Closure, search_dirs: Sequence[Path]
) -> tuple[list[Problem], list[Unverified]]:
    """The NEEDED libraries of the load the loader cannot find: a problem where the load fails for certain (a
    misplaced one, torch's or the CUDA runtime), else unverified (its symbols go unchecked)."""
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
    return problems, unverified


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
