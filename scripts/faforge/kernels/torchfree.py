"""Check a binary that must not touch torch at all: the kernel library.

libflash-attn-kernels is built once per (platform, CUDA, archs, Philox layout) and shared by the
flash-attn glue of every torch minor of that layout and both C++ ABIs. That holds only if the library
  * needs no torch, c10, Python or pybind11 library (DT_NEEDED), and neither imports nor defines a symbol
    of theirs (a c10:: import would bind to whichever torch is loaded; a Py* one to the interpreter);
  * exports nothing whose meaning depends on _GLIBCXX_USE_CXX11_ABI (std::__cxx11 types, the [abi:cxx11]
    tag, the old ABI's `Ss` std::string), so a glue of either ABI can call it (a function *returning* an
    old-ABI std::string has no mark in its name: that one no symbol check can see);
  * optionally exports only names matching an allowlist (`run_mha_*`): cutlass or std instantiations
    leaking out would be interposed by, or interpose on, another library's copies;
  * carries exactly the GPU code of its arch list (SASS per arch, PTX for the `+PTX` arch).
`check_torch_free` returns the findings as data; `render_text` and `TorchFreeReport.to_json` show them
(schema: tests/schemas/check-abi-torch-free.json).

The kernel package's own recipe test runs it standalone (standard library and pyelftools only, like
faforge.abi.gate):
    python -m faforge.kernels.torchfree LIBRARY --expect-archs "80;90+PTX" --exports "run_mha_*,flash_attn_kernels_*"
Exit status: 0 passes, 1 findings, 2 bad input.
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from faforge.abi import classify
from faforge.abi.demangle import demangle
from faforge.abi.elf import ElfError, read_elf
from faforge.abi.fatbin import GpuArchs, read_gpu_archs
from faforge.abi.gate import parse_archs
from faforge.abi.signature import components, parse_signature
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN

REPORT_VERSION = 1
ET_DYN = 3
TORCH_LIBRARY = "torch-library"
TORCH_SYMBOL = "torch-symbol"
ABI_DEPENDENT_EXPORT = "abi-dependent-export"
UNEXPECTED_EXPORT = "unexpected-export"
GPU_ARCHS = "gpu-archs"
KINDS = (TORCH_LIBRARY, TORCH_SYMBOL, ABI_DEPENDENT_EXPORT, UNEXPECTED_EXPORT, GPU_ARCHS)

# What the kernel library may export: the run_mha_* launches and its C interface, as the version script
# scripts/faforge/kernels/torch_shim/exports.map exports them (verify's abi gate of a kernel package).
KERNEL_LIBRARY_EXPORTS = FLASH_ATTN.kernel_exports
# libtorch*.so, libc10*.so, libcaffe2*, libshm (torch's), libpython3.X.so, and pybind11's (none ship one).
TORCH_NEEDED = re.compile(r"^lib(?:torch|c10|caffe2|shm|python\d|pybind11)")
# A demangled name mentioning torch's namespaces or pybind11's, as its scope or in a parameter type.
TORCH_NAMESPACE = re.compile(r"(?<![\w:])(?:c10|at|torch|caffe2|pybind11)::")
# Mangled fragments of those namespaces (<length><name>): a cheap filter before demangling.
TORCH_MANGLED_FRAGMENTS = ("3c10", "2at", "5torch", "6caffe2", "8pybind11")
# The CPython API (Py_*, PyObject_*, _Py*, PyInit_<module>): only an interpreter or an extension has these.
PYTHON_SYMBOL = re.compile(r"^_?Py[A-Z_]")


@dataclass(frozen=True)
class Finding:
    kind: str  # one of KINDS
    subject: str  # the library, symbol or arch the finding is about
    demangled: str | None
    detail: str


@dataclass(frozen=True)
class TorchFreeReport:
    path: str
    machine: str
    needed: tuple[str, ...]
    exports: int  # exported (defined, global/weak, default/protected visibility) dynamic symbols
    imports: int
    gpu: GpuArchs
    expect_archs: tuple[tuple[str, ...], tuple[str, ...]] | None  # (SASS, PTX) the binary must carry
    export_patterns: tuple[str, ...] | None
    problems: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "version": REPORT_VERSION,
            "mode": "torch-free",
            "ok": self.ok,
            "path": self.path,
            "machine": self.machine,
            "needed": list(self.needed),
            "exports": self.exports,
            "imports": self.imports,
            "gpu": {"sass": list(self.gpu.sass), "ptx": list(self.gpu.ptx)},
            "expect_archs": None
            if self.expect_archs is None
            else {"sass": list(self.expect_archs[0]), "ptx": list(self.expect_archs[1])},
            "export_patterns": None if self.export_patterns is None else list(self.export_patterns),
            "problems": [
                {"kind": p.kind, "subject": p.subject, "demangled": p.demangled, "detail": p.detail}
                for p in self.problems
            ],
        }


def parse_export_patterns(spec: str | None) -> tuple[str, ...] | None:
    """'run_mha_*,flash_attn_kernels_*' -> ('run_mha_*', 'flash_attn_kernels_*'); None when not given."""
    if spec is None:
        return None
    patterns = tuple(p.strip() for p in spec.split(",") if p.strip())
    if not patterns:
        raise FaforgeError(
            f"--exports {spec!r}: no pattern",
            hint=f"pass shell-style patterns of the allowed names, e.g. '{KERNEL_LIBRARY_EXPORTS}'",
        )
    return patterns


def base_name(demangled: str) -> str:
    """'void flash::run_mha_fwd_<cutlass::half_t, 32, false>(flash::Flash_fwd_params&, CUstream_st*)' ->
    'run_mha_fwd_': the last component of the qualified name, without template arguments."""
    last = components(parse_signature(demangled).qualified_name)[-1]
    return last.split("<", 1)[0]


def _mentions_torch(name: str) -> str | None:
    """The demangled name when `name` is a torch, pybind11 or CPython symbol, else None."""
    if PYTHON_SYMBOL.match(name):
        return name
    if name.startswith("_Z") and any(f in name for f in TORCH_MANGLED_FRAGMENTS):
        demangled = demangle(name)
        if demangled is None:  # no demangler here: fall back on the mangled namespace prefix
            return name if classify.is_torch_mangled(name) or name.startswith("_ZN8pybind11") else None
        return demangled if TORCH_NAMESPACE.search(demangled) else None
    return None


def check_torch_free(path: str | Path, expect_archs: str | None = None, exports: str | None = None) -> TorchFreeReport:
    """Everything that ties the shared library at `path` to a torch, a Python or a C++ ABI, and any GPU
    code that differs from `expect_archs` ('80;90;100;120+PTX'); `exports` ('run_mha_*,...') limits the
    exported names (matched on demangled base names)."""
    expected = parse_archs(expect_archs) if expect_archs is not None else None
    patterns = parse_export_patterns(exports)
    path = Path(path)
    if not path.is_file():
        raise ElfError(f"{path}: no such file; pass the shared library to check (e.g. {FLASH_ATTN.kernel_library})")
    info, symbols = read_elf(path)
    if info.file_type != ET_DYN:
        raise ElfError(f"{path}: ELF type {info.file_type} is not a shared library; pass a linked .so")
    problems = [
        Finding(TORCH_LIBRARY, need, None, f"needs {need} (DT_NEEDED): it would load a torch or Python library")
        for need in info.needed
        if TORCH_NEEDED.match(need)
    ]
    exported = symbols.exports()
    version_nodes = set(symbols.defines) | ({info.soname} if info.soname else set())
    imports = [s.name for s in symbols.undefined()]
    for name in imports:
        if (demangled := _mentions_torch(name)) is not None:
            problems.append(
                Finding(
                    TORCH_SYMBOL,
                    name,
                    demangled,
                    "imports it: only torch, pybind11 or the Python interpreter provides it",
                )
            )
    for name in (n for n in exported if n not in version_nodes):
        if (demangled := _mentions_torch(name)) is not None:
            problems.append(
                Finding(
                    TORCH_SYMBOL,
                    name,
                    demangled,
                    "exports it: a torch, pybind11 or Python symbol defined here would clash with the real one",
                )
            )
            continue
        abi = classify.abi_of_name(name)
        if abi is not None:
            problems.append(
                Finding(
                    ABI_DEPENDENT_EXPORT,
                    name,
                    demangle(name),
                    f"exported with a type of the {classify.ABI_NAMES[abi]}: "
                    "a caller built with the other ABI cannot use it",
                )
            )
        elif patterns is not None:
            shown = demangle(name) or name
            if not any(fnmatch.fnmatchcase(base_name(shown), p) for p in patterns):
                problems.append(
                    Finding(
                        UNEXPECTED_EXPORT,
                        name,
                        shown,
                        f"exported, but its base name {base_name(shown)!r} matches none of {', '.join(patterns)}",
                    )
                )
    gpu = read_gpu_archs(path)
    if expected is not None:
        for kind, want, have in (("SASS", expected[0], gpu.sass), ("PTX", expected[1], gpu.ptx)):
            if set(want) != set(have):
                problems.append(
                    Finding(
                        GPU_ARCHS,
                        kind,
                        None,
                        f"{kind} is {', '.join(have) or 'none'}; the arch list "
                        f"{expect_archs!r} needs {', '.join(want) or 'none'}",
                    )
                )
    return TorchFreeReport(
        str(path), info.machine, info.needed, len(exported), len(imports), gpu, expected, patterns, tuple(problems)
    )


def render_text(report: TorchFreeReport) -> list[str]:
    """The report in plain words, one line each, like `faforge check-abi`'s."""
    gpu = ", ".join([*report.gpu.sass, *(f"PTX {p}" for p in report.gpu.ptx)]) or "none (CPU only)"
    lines = [
        f"{report.path}: torch-free check",
        f"  built for: {report.machine}; needs {', '.join(report.needed) or 'no library'}",
        f"  GPU code: {gpu}",
        f"  {report.exports} exported symbols, {report.imports} imported"
        + (f"; exports allowed: {', '.join(report.export_patterns)}" if report.export_patterns else ""),
    ]
    for p in report.problems:
        lines.append(f"  {p.kind}: {p.demangled or p.subject}")
        if p.demangled and p.demangled != p.subject:
            lines.append(f"    symbol: {p.subject}")
        lines.append(f"    {p.detail}")
    count = len(report.problems)
    status = "OK" if report.ok else f"FAILED ({count} problem{'s' if count != 1 else ''})"
    lines.append(f"{status}: {report.path} {'passes' if report.ok else 'fails'} the torch-free check")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faforge.kernels.torchfree", description=__doc__.split("\n\n")[0])
    parser.add_argument("library", metavar="LIBRARY")
    parser.add_argument("--expect-archs", metavar="LIST")
    parser.add_argument("--exports", metavar="PATTERNS")
    args = parser.parse_args(argv)
    try:
        report = check_torch_free(args.library, args.expect_archs, args.exports)
    except FaforgeError as exc:  # ElfError is one
        print(f"faforge.kernels.torchfree: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(render_text(report)))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
