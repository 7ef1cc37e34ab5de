"""The ABI gate's verdict as data, and its versioned JSON form (its words: faforge.abi.report_text).

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
