"""The ABI gate's verdict as data, and its versioned JSON form.

The JSON shape is fixed by check-abi.schema.json beside this file (tests
validate every report against it); bump REPORT_VERSION when it changes
incompatibly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faforge.abi.fatbin import GpuArchs

REPORT_VERSION = 1
SCHEMA = Path(__file__).with_name("check-abi.schema.json")


@dataclass(frozen=True)
class Problem:
    kind: str  # one of faforge.abi.classify.KINDS
    symbol: str | None  # mangled symbol, or the symbol version for glibc-too-new
    demangled: str | None
    library: str | None  # the library the symbol was looked for in, or that is missing
    detail: str  # one sentence in plain words
    offers: tuple[str, ...] = ()  # demangled declarations the libraries offer instead


@dataclass(frozen=True)
class Unverified:
    """A needed library that was not found (and is not torch): its symbols could not be checked."""

    name: str
    needed_by: str
    reason: str


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

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class Verdict:
    extension: str
    against: tuple[str, ...]
    torch: TorchFacts
    modules: tuple[ModuleVerdict, ...]
    glibc: str | None = None
    platform: str | None = None

    @property
    def ok(self) -> bool:
        return all(m.ok for m in self.modules)

    def to_json(self) -> dict:
        return {
            "version": REPORT_VERSION,
            "ok": self.ok,
            "extension": self.extension,
            "against": list(self.against),
            "glibc": self.glibc,
            "platform": self.platform,
            "torch": {
                "lib_dirs": list(self.torch.lib_dirs), "version": self.torch.version, "cuda": self.torch.cuda,
                "machine": self.torch.machine, "cxx11_abi": self.torch.cxx11_abi,
            },
            "problems": [_problem_json(p, m.path) for m in self.modules for p in m.problems],
            "unverified_libraries": [
                {"name": u.name, "needed_by": u.needed_by, "reason": u.reason, "module": m.path}
                for m in self.modules for u in m.unverified_libraries
            ],
            "modules": [_module_json(m) for m in self.modules],
        }


def _problem_json(p: Problem, module: str) -> dict:
    return {"kind": p.kind, "symbol": p.symbol, "demangled": p.demangled, "library": p.library,
            "detail": p.detail, "offers": list(p.offers), "module": module}


def _module_json(m: ModuleVerdict) -> dict:
    d = m.declared
    return {
        "path": m.path,
        "ok": m.ok,
        "declares": {
            "machine": d.machine, "elf_class": d.elf_class, "cxx11_abi": d.cxx11_abi,
            "gpu": {"sass": list(d.gpu.sass), "ptx": list(d.gpu.ptx)},
            "newest_versions": dict(d.newest_versions),
        },
        "libraries": [{"name": lib.name, "path": lib.path} for lib in m.libraries],
        "interpreter_symbols": m.interpreter_symbols,
        "unresolved_unverified": m.unresolved_unverified,
    }
