"""The ABI gate's verdict as data, and its versioned JSON form.

The JSON shape is fixed by tests/schemas/check-abi.json (the tests validate
every report they produce against it); bump REPORT_VERSION when it changes
incompatibly.
"""

from __future__ import annotations

from dataclasses import dataclass

from faforge.abi.fatbin import GpuArchs
from faforge.abi.ld_search import Misplaced

REPORT_VERSION = 1
# The three verdicts (`verdict` in JSON; check-abi exits 0, 1, 3): a library the load needs that was found
# nowhere may hold the very imports that fail (torch's among them), so its absence is never an OK; nor is
# a binary that uses a type whose layout changed across torch releases when its side does not show
# (faforge.abi.layout).
OK, PROBLEMS, CANNOT_TELL = "ok", "problems", "cannot-tell"
# How the package loads a binary (`loaded_by` in JSON): `import` (an extension module, exporting PyInit_*),
# or its own Python code after `import torch` (torch.ops.load_library, ctypes.CDLL: a library with no
# PyInit_ that needs torch's libraries). ld.so binds both alike; the report says which it was.
IMPORT, LOAD_LIBRARY = "import", "load-library"


@dataclass(frozen=True)
class Problem:
    kind: str  # one of faforge.abi.classify.KINDS
    symbol: str | None  # mangled symbol, or the symbol version for glibc-too-new
    demangled: str | None
    library: str | None  # the library the symbol was looked for in, or that is missing
    detail: str  # one sentence in plain words
    offers: tuple[str, ...] = ()  # demangled declarations the libraries offer instead
    imported_by: str | None = None  # the object whose import fails: the module, or a library its load brings in
    misplaced: Misplaced | None = (
        None  # a missing library that is there, where a lexical `..` leads (not in JSON: detail says it)
    )


@dataclass(frozen=True)
class Unverified:
    """A needed library that was not found (and is not torch): its symbols could not be checked.

    One that only torch's own libraries need (`by_torch`) is `import torch`'s business: it loads or
    fails before the module, so it leaves the module's verdict alone."""

    name: str
    needed_by: str
    reason: str
    by_torch: bool = False


@dataclass(frozen=True)
class Declared:
    """What the binary itself says it was built for."""

    machine: str
    elf_class: int
    cxx11_abi: int | None
    gpu: GpuArchs
    newest_versions: dict[str, str]  # {"GLIBC": "GLIBC_2.28", "GLIBCXX": "GLIBCXX_3.4.29", ...}


@dataclass(frozen=True)
class TorchFacts:
    """What the torch in --against provides."""

    lib_dirs: tuple[str, ...]
    version: str | None  # from torch/version.py when present
    cuda: str | None
    machine: str | None
    cxx11_abi: int | None


@dataclass(frozen=True)
class LoadedLibrary:
    name: str
    path: str | None
    beside_module: bool = False  # found by no search path; taken from the module's package, loaded first as it loads it


@dataclass(frozen=True)
class ModuleVerdict:
    """The check of one extension module (a wheel or package can hold several)."""

    path: str
    declared: Declared
    libraries: tuple[LoadedLibrary, ...]
    problems: tuple[Problem, ...]
    unverified_libraries: tuple[Unverified, ...]
    interpreter_symbols: int  # Py*/_Py* symbols left to the Python interpreter that loads the module
    unresolved_unverified: int  # symbols not found, which the unverified libraries may provide
    loaded_by: str = IMPORT  # IMPORT or LOAD_LIBRARY
    untold: tuple[str, ...] = ()  # why a known silent layout break can be neither ruled out nor confirmed

    @property
    def undecided(self) -> tuple[Unverified, ...]:
        """The unfound libraries the module's own load needs: while one is missing, its verdict cannot be told."""
        return tuple(u for u in self.unverified_libraries if not u.by_torch)

    @property
    def verdict(self) -> str:
        return PROBLEMS if self.problems else CANNOT_TELL if self.undecided or self.untold else OK

    @property
    def ok(self) -> bool:
        return self.verdict == OK


@dataclass(frozen=True)
class LibrarySet:
    """Libraries of one package folder that differ only in the torch release they are for: the package
    loads the one for its torch (faforge.abi.library_sets), so only that one is checked (as a module)."""

    files: str  # the set in one name: folder/libx_torch{24,25}-{cpu,cuda}.so
    members: tuple[str, ...]  # each member's path in the package
    package: str | None  # the data row's package; None: no row knows the set
    loads: tuple[str, ...]  # the members the package loads with this torch, checked in `modules`
    verdict: (
        str  # OK: the members it loads are judged in modules (or it loads none); PROBLEMS: the one it opens is missing
    )
    detail: str
    problem: Problem | None = None  # the missing member, when the package's import fails for want of it


@dataclass(frozen=True)
class Verdict:
    extension: str
    against: tuple[str, ...]
    torch: TorchFacts
    modules: tuple[ModuleVerdict, ...]
    glibc: str | None = None
    platform: str | None = None
    sets: tuple[LibrarySet, ...] = ()

    @property
    def verdict(self) -> str:
        kinds = {m.verdict for m in self.modules} | {s.verdict for s in self.sets}
        if not self.modules and PROBLEMS not in kinds:  # every set loads nothing here: nothing was verified
            return CANNOT_TELL
        return PROBLEMS if PROBLEMS in kinds else CANNOT_TELL if CANNOT_TELL in kinds else OK

    @property
    def ok(self) -> bool:
        return self.verdict == OK

    def to_json(self) -> dict:
        return {
            "version": REPORT_VERSION,
            "ok": self.ok,
            "verdict": self.verdict,
            "extension": self.extension,
            "against": list(self.against),
            "glibc": self.glibc,
            "platform": self.platform,
            "torch": {
                "lib_dirs": list(self.torch.lib_dirs),
                "version": self.torch.version,
                "cuda": self.torch.cuda,
                "machine": self.torch.machine,
                "cxx11_abi": self.torch.cxx11_abi,
            },
            "problems": [
                *(_problem_json(p, m.path) for m in self.modules for p in m.problems),
                *(_problem_json(s.problem, s.problem.library) for s in self.sets if s.problem),
            ],
            "unverified_libraries": [
                {"name": u.name, "needed_by": u.needed_by, "reason": u.reason, "module": m.path, "by_torch": u.by_torch}
                for m in self.modules
                for u in m.unverified_libraries
            ],
            "modules": [_module_json(m) for m in self.modules],
            "library_sets": [
                {
                    "files": s.files,
                    "members": list(s.members),
                    "package": s.package,
                    "loads": list(s.loads),
                    "verdict": s.verdict,
                    "detail": s.detail,
                }
                for s in self.sets
            ],
        }


def _problem_json(p: Problem, module: str | None) -> dict:
    return {
        "kind": p.kind,
        "symbol": p.symbol,
        "demangled": p.demangled,
        "library": p.library,
        "detail": p.detail,
        "offers": list(p.offers),
        "imported_by": p.imported_by,
        "module": module,
    }


def _module_json(m: ModuleVerdict) -> dict:
    d = m.declared
    return {
        "path": m.path,
        "loaded_by": m.loaded_by,
        "ok": m.ok,
        "verdict": m.verdict,
        "declares": {
            "machine": d.machine,
            "elf_class": d.elf_class,
            "cxx11_abi": d.cxx11_abi,
            "gpu": {"sass": list(d.gpu.sass), "ptx": list(d.gpu.ptx)},
            "newest_versions": dict(d.newest_versions),
        },
        "libraries": [{"name": lib.name, "path": lib.path, "beside_module": lib.beside_module} for lib in m.libraries],
        "interpreter_symbols": m.interpreter_symbols,
        "unresolved_unverified": m.unresolved_unverified,
        "untold": list(m.untold),
    }


# -- text ---------------------------------------------------------------------------------------


def render_text(verdict: Verdict) -> list[str]:
    """The verdict in plain words, one line each, for people and CI logs."""
    lines = [f"torch: {_torch_words(verdict.torch)}"]
    for library_set in verdict.sets:
        whose = f"{library_set.package}'s rule" if library_set.package else "no known rule"
        lines += [
            f"{library_set.files}: one library per torch release ({len(library_set.members)} files, {whose}):",
            f"  {'missing-library: ' if library_set.problem else ''}{library_set.detail}",
        ]
    for module in verdict.modules:
        lines += _module_lines(module)
    count = sum(len(m.problems) for m in verdict.modules) + sum(1 for s in verdict.sets if s.problem)
    missing = sorted({u.name for m in verdict.modules for u in m.undecided})
    untold = [s.files for s in verdict.sets if s.verdict == CANNOT_TELL]
    layout_untold = [reason for m in verdict.modules for reason in m.untold]
    why = [
        *([f"needs {', '.join(missing)}, found nowhere"] if missing else []),
        *([f"which of {', '.join(untold)} the package loads is unknown"] if untold else []),
        *(["a known layout break may apply"] if layout_untold else []),
    ]
    why = why or ["the package loads none of its libraries with this torch: nothing was checked"]
    status = {
        OK: "OK",
        PROBLEMS: f"FAILED ({count} problem{'s' if count != 1 else ''})",
        CANNOT_TELL: f"CANNOT TELL ({'; '.join(why)})",
    }[verdict.verdict]
    lines.append(f"{status}: {verdict.extension} against {', '.join(verdict.against)}")
    if verdict.verdict == CANNOT_TELL and layout_untold:
        lines += [f"  {reason}" for reason in layout_untold]
    if verdict.verdict == CANNOT_TELL and missing:
        lines.append(
            f'  a bare load of the module fails on {", ".join(missing)} ("cannot open shared object file"), and what '
            "that library imports, torch's symbols among them, was not checked: install it, pass its folder with "
            "--library-dir, or check the package as it is installed"
        )
    return lines


def _abi_words(abi: int | None) -> str:
    return "C++ ABI unknown (no std::string in its symbols)" if abi is None else f"_GLIBCXX_USE_CXX11_ABI={abi}"


def _torch_words(torch: TorchFacts) -> str:
    version = torch.version or "unknown version"
    cuda = f", CUDA {torch.cuda}" if torch.cuda else ""
    return (
        f"{version}{cuda}, {torch.machine or 'unknown machine'}, "
        f"{_abi_words(torch.cxx11_abi)} in {', '.join(torch.lib_dirs)}"
    )


def _module_lines(module: ModuleVerdict) -> list[str]:
    d = module.declared
    gpu = ", ".join([*d.gpu.sass, *(f"PTX {p}" for p in d.gpu.ptx)]) or "none (CPU only)"
    versions = ", ".join(d.newest_versions.values()) or "none"
    how = (
        ""
        if module.loaded_by == IMPORT
        else " (a library its package loads itself after `import torch`: torch.ops.load_library, ctypes)"
    )
    lines = [
        f"{module.path}{how}:",
        f"  built for: {d.machine} ({d.elf_class}-bit), {_abi_words(d.cxx11_abi)}",
        f"  GPU code: {gpu}",
        f"  needs at least: {versions}",
        f"  loads {len(module.libraries)} libraries; "
        f"{module.interpreter_symbols} symbols come from the Python interpreter",
    ]
    for lib in module.libraries:
        if lib.beside_module:
            lines.append(
                f"  taken from beside the module: {lib.name} ({lib.path}): "
                "no search path finds it, so the package must "
                "load it first, as torchaudio's and torchtext's own code do; checked as loaded first"
            )
    for u in module.unverified_libraries:
        whose = " (torch's own; `import torch` loads it or fails first)" if u.by_torch else ""
        lines.append(f"  unverified: {u.name} (needed by {u.needed_by}){whose}: {u.reason}")
    if module.unresolved_unverified:
        lines.append(
            f"  unverified: {module.unresolved_unverified} symbols are not in the libraries found; "
            "they may come from the unverified ones"
        )
    for p in module.problems:
        subject = p.demangled or p.symbol or p.library
        if subject is None:  # nothing to name but the finding itself (the --platform check)
            lines.append(f"  {p.kind}: {p.detail}")
            continue
        lines.append(f"  {p.kind}: {subject}")
        if p.symbol and p.demangled and p.demangled != p.symbol:
            lines.append(f"    symbol: {p.symbol}")
        if p.imported_by and p.imported_by != module.path:
            lines.append(f"    imported by: {p.imported_by} (a library this load brings in)")
        lines.append(f"    {p.detail}")
    return lines
