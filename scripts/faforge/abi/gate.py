"""The ABI gate inside a package's own test environment (the recipe's test section).

    python -m faforge.abi.gate --expect-cxx11-abi 1 --expect-archs "sm_80,sm_90" [--against DIR]

Finds the installed extension module (`flash_attn_2_cuda*.so` in this Python's
site-packages), checks it against this environment's torch exactly as
`faforge check-abi` does, and also requires that what the binary contains
matches what the build cell declares.

Arguments:
  --expect-cxx11-abi {0,1}  the cell's _GLIBCXX_USE_CXX11_ABI; the binary's mangled names must show it.
  --expect-archs LIST       the cell's GPU architectures, separated by commas, semicolons or spaces:
                            "sm_80,sm_90", "80;90", "90a" or "120+PTX". The binary's SASS list must equal
                            the listed SMs, and its PTX list must equal the entries marked +PTX (none
                            marked: no PTX allowed).
  --against DIR             the torch to check against (torch/lib, site-packages or prefix). Default: the
                            torch installed in this environment, found on sys.path without importing it
                            (a CPU-only test machine may not be able to import a CUDA torch).
  --module NAME             the extension module's name (default: flash_attn_2_cuda).
  --glibc X.Y               also fail when the binary needs a glibc newer than X.Y.

Exit status: 0 all good, 1 problems found or a declaration mismatch, 2 bad input
(module or torch not found, malformed file). Needs only the standard library and pyelftools, so the
recipe can ship faforge/abi (with faforge/__init__.py and faforge/errors.py) as test files and list
pyelftools in that test's requirements.
"""

from __future__ import annotations

import argparse
import re
import sys
import sysconfig
from pathlib import Path

from faforge.abi.check import check_path
from faforge.abi.report import Verdict
from faforge.abi.report_text import render_text
from faforge.abi.resolve import torch_lib_dirs
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN

_ARCH = re.compile(r"(?:sm_|compute_)?(\d+)\.?(\d*)([af]?)(\+ptx)?", re.IGNORECASE)


def parse_archs(spec: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """'80;90;120+PTX' -> (('sm_80', 'sm_90', 'sm_120'), ('compute_120',))."""
    sass, ptx = [], []
    for item in filter(None, re.split(r"[,;\s]+", spec.strip())):
        match = _ARCH.fullmatch(item)
        if not match:
            raise FaforgeError(
                f"--expect-archs {spec!r}: {item!r} is not an SM", hint="name SMs such as sm_80, 90, 90a or 120+PTX"
            )
        number = f"{match.group(1)}{match.group(2)}{match.group(3).lower()}"
        sass.append(f"sm_{number}")
        if match.group(4):
            ptx.append(f"compute_{number}")
    if not sass:
        raise FaforgeError("--expect-archs is empty", hint="pass the arch list, e.g. 'sm_80,sm_90' or '80;90;120+PTX'")
    return tuple(sass), tuple(ptx)


def find_module(name: str, search: list[str]) -> Path:
    """The one `<name>*.so` directly inside the first site-packages-like folder that has it."""
    for folder in dict.fromkeys(search):
        found = sorted(Path(folder).glob(f"{name}*.so")) if folder and Path(folder).is_dir() else []
        if len(found) > 1:
            raise FaforgeError(
                f"{folder}: several {name}*.so ({', '.join(p.name for p in found)}); pass one with --module"
            )
        if found:
            return found[0]
    raise FaforgeError(
        f"no {name}*.so in {', '.join(filter(None, dict.fromkeys(search)))}; is the package installed here?"
    )


def default_torch(search: list[str]) -> str:
    """The site-packages (pip torch) or prefix (conda libtorch in PREFIX/lib) holding this env's torch."""
    for folder in [*dict.fromkeys(search), sys.prefix]:
        if folder and Path(folder).is_dir():
            try:
                torch_lib_dirs(folder)
            except FaforgeError:
                continue
            return folder
    raise FaforgeError(f"no torch libraries on sys.path or in {sys.prefix}/lib; pass --against DIR")


def declaration_mismatches(verdict: Verdict, abi: int, sass: tuple[str, ...], ptx: tuple[str, ...]) -> list[str]:
    """What the binary contains but the cell does not declare, in plain words."""
    lines = []
    for module in verdict.modules:
        declared = module.declared
        if declared.cxx11_abi != abi:
            lines.append(
                f"{module.path}: the cell declares _GLIBCXX_USE_CXX11_ABI={abi}, "
                "the binary was built with "
                f"{declared.cxx11_abi if declared.cxx11_abi is not None else 'an unknown ABI'}"
            )
        if set(declared.gpu.sass) != set(sass):
            lines.append(
                f"{module.path}: the cell declares SASS {', '.join(sass)}, "
                f"the binary has {', '.join(declared.gpu.sass) or 'none'}"
            )
        if set(declared.gpu.ptx) != set(ptx):
            lines.append(
                f"{module.path}: the cell declares PTX {', '.join(ptx) or 'none'}, "
                f"the binary has {', '.join(declared.gpu.ptx) or 'none'}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faforge.abi.gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--expect-cxx11-abi", type=int, choices=[0, 1], required=True)
    parser.add_argument("--expect-archs", required=True)
    parser.add_argument("--against", metavar="DIR")
    parser.add_argument("--module", default=FLASH_ATTN.extension)
    parser.add_argument("--glibc", metavar="X.Y")
    args = parser.parse_args(argv)
    search = [sysconfig.get_paths()["platlib"], sysconfig.get_paths()["purelib"], *sys.path]
    try:
        sass, ptx = parse_archs(args.expect_archs)
        module = find_module(args.module, search)
        verdict = check_path(module, [args.against or default_torch(search)], glibc=args.glibc)
    except FaforgeError as exc:
        print(f"faforge.abi.gate: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(render_text(verdict)))
    mismatches = declaration_mismatches(verdict, args.expect_cxx11_abi, sass, ptx)
    for line in mismatches:
        print(f"declaration mismatch: {line}")
    passed = verdict.ok and not mismatches
    declared = f"_GLIBCXX_USE_CXX11_ABI={args.expect_cxx11_abi}, SASS {', '.join(sass)}, PTX {', '.join(ptx) or 'none'}"
    print(f"ABI gate {'passed' if passed else 'FAILED'}: {module.name} against {verdict.against[0]} ({declared})")
    return EXIT_OK if passed else EXIT_PROBLEMS


if __name__ == "__main__":
    sys.exit(main())
