"""Prove that an extension loads against a torch, or explain precisely why it does not.

Resolves the extension's undefined dynamic symbols against the libraries it
loads (found in the --against folders first, then RUNPATH and the system path),
honouring symbol versions, and names each problem: missing-library,
abi-mismatch, signature-drift, missing-symbol, wrong-architecture,
glibc-too-new. Also prints what the binary declares: C++ ABI, machine, GPU
architectures (SASS/PTX, read from the fatbinary) and newest GLIBC/GLIBCXX.
Exit status: 0 no problems, 1 problems found, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from faforge.abi.check import PLATFORM_MACHINES, check_path
from faforge.abi.report import ModuleVerdict, TorchFacts, Verdict
from faforge.errors import EXIT_OK, EXIT_PROBLEMS


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", metavar="PATH", help="extension .so, wheel, .conda/.tar.bz2 package, or a folder holding extension modules")
    parser.add_argument("--against", metavar="DIR", action="append", required=True,
                        help="torch to check against: a torch/lib folder, site-packages, venv or conda prefix (repeatable)")
    parser.add_argument("--glibc", metavar="X.Y", help="oldest glibc the binary must run on (the target sysroot's), e.g. 2.28")
    parser.add_argument("--platform", choices=sorted(PLATFORM_MACHINES), help="conda platform the binary is for")
    parser.add_argument("--json", action="store_true", help="print the versioned JSON report instead of text")


def execute(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    verdict = check_path(args.path, args.against, glibc=args.glibc, platform=args.platform)
    if args.json:
        json.dump(verdict.to_json(), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(render(verdict, time.perf_counter() - started)))
    return EXIT_OK if verdict.ok else EXIT_PROBLEMS


def render(verdict: Verdict, seconds: float) -> list[str]:
    lines = [f"torch: {_torch_words(verdict.torch)}"]
    for module in verdict.modules:
        lines += _module_lines(module)
    count = sum(len(m.problems) for m in verdict.modules)
    status = "OK" if verdict.ok else f"FAILED ({count} problem{'s' if count != 1 else ''})"
    lines.append(f"{status}: {verdict.extension} against {', '.join(verdict.against)} ({seconds:.2f}s)")
    return lines


def _abi_words(abi: int | None) -> str:
    return "C++ ABI unknown (no std::string in its symbols)" if abi is None else f"_GLIBCXX_USE_CXX11_ABI={abi}"


def _torch_words(torch: TorchFacts) -> str:
    version = torch.version or "unknown version"
    cuda = f", CUDA {torch.cuda}" if torch.cuda else ""
    return f"{version}{cuda}, {torch.machine or 'unknown machine'}, {_abi_words(torch.cxx11_abi)} in {', '.join(torch.lib_dirs)}"


def _module_lines(module: ModuleVerdict) -> list[str]:
    d = module.declared
    gpu = ", ".join([*d.gpu.sass, *(f"PTX {p}" for p in d.gpu.ptx)]) or "none (CPU only)"
    versions = ", ".join(d.newest_versions.values()) or "none"
    lines = [
        f"{module.path}:",
        f"  built for: {d.machine} ({d.elf_class}-bit), {_abi_words(d.cxx11_abi)}",
        f"  GPU code: {gpu}",
        f"  needs at least: {versions}",
        f"  loads {len(module.libraries)} libraries; {module.interpreter_symbols} symbols come from the Python interpreter",
    ]
    for u in module.unverified_libraries:
        lines.append(f"  unverified: {u.name} (needed by {u.needed_by}): {u.reason}")
    if module.unresolved_unverified:
        lines.append(f"  unverified: {module.unresolved_unverified} symbols are not in the libraries found; "
                     "they may come from the unverified ones")
    for p in module.problems:
        lines.append(f"  {p.kind}: {p.demangled or p.symbol or p.library}")
        if p.symbol and p.demangled and p.demangled != p.symbol:
            lines.append(f"    symbol: {p.symbol}")
        lines.append(f"    {p.detail}")
    return lines
