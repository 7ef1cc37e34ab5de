"""Prove that an extension loads against a torch, or explain precisely why it does not.

Resolves the extension's undefined dynamic symbols against the libraries it
loads (found in the --against folders first, then RUNPATH and the system path),
honouring symbol versions, and names each problem: missing-library,
abi-mismatch, signature-drift, missing-symbol, wrong-architecture,
glibc-too-new. Also prints what the binary declares: C++ ABI, machine, GPU
architectures (SASS/PTX, read from the fatbinary) and newest GLIBC/GLIBCXX.
With --torch-free instead of --against, checks a binary that must not touch torch at all (the
kernel library of the split build): no torch/c10/Python/pybind11 library or symbol, no export whose meaning
depends on the C++ ABI, optionally only exports matching --exports, and exactly the GPU code of
--expect-archs (faforge.kernels.torchfree).
With --stable-abi, each --against is one torch release: PATH must import from torch only its stable C
interface (aoti_torch_*, torch_*; faforge.abi.stable) and load on every one of them (a stable-ABI package's claim).
In a wheel, conda package or folder, what the package loads is checked: its extension modules (PyInit_*)
and the libraries its own Python code opens after import torch (torch.ops.load_library: no PyInit_, needs
torch's libraries), each named by its path in the package; of a per-torch library set
(libx_torch{27,28}-{cpu,cuda}.so) only the member the package's loader picks for this torch
(variants/torch-library-sets.yaml), or "cannot tell" where that is unknown.
A needed library that no search path finds but that lies beside the module, or in its package's lib/, is
taken as loaded first, as packages such as torchaudio load theirs, and checked like the rest; one found
nowhere leaves the verdict untold.
Every symbol may resolve and the load still crash: a binary that hands torch a type whose layout changed across
a torch boundary (faforge/abi/layout_breaks.json: torch::CppFunction at 2.9) is a layout-break problem when its
side differs from the torch's, and leaves the verdict untold when its side does not show (faforge.abi.layout).
Exit status: 0 no problems, 1 problems found, 2 bad input, 3 cannot tell (a library the load needs was found nowhere,
which member of a per-torch library set the package loads is unknown, or it loads none, or a known layout break can
be neither ruled out nor confirmed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from faforge import paths
from faforge.abi.check import PLATFORM_MACHINES, check_path
from faforge.abi.report import CANNOT_TELL, Verdict
from faforge.abi.report_text import render_text
from faforge.abi.stable import StableVerdict, check_stable, render_stable_text
from faforge.doctor.torch_symbols import dating
from faforge.doctor.torch_symbols_file import default_table
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED, FaforgeError, why_not_a_folder
from faforge.family import FLASH_ATTN
from faforge.kernels import torchfree


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="PATH",
        help="extension .so, wheel, .conda/.tar.bz2 package, or a "
        "folder holding extension modules or torch.ops libraries",
    )
    parser.add_argument(
        "--against",
        metavar="DIR",
        action="append",
        help="torch to check against: a torch/lib folder, site-packages, venv or conda prefix (repeatable)",
    )
    parser.add_argument(
        "--library-dir",
        metavar="DIR",
        action="append",
        type=Path,
        default=[],
        help="a folder holding other libraries the extension loads, searched after the torch's, e.g. the lib/ "
        f"of a split {FLASH_ATTN.package}'s {FLASH_ATTN.kernel_package} package (repeatable)",
    )
    parser.add_argument(
        "--torch-free",
        action="store_true",
        help="instead of --against: PATH is a shared library that must not touch torch, Python or the C++ ABI",
    )
    parser.add_argument(
        "--stable-abi",
        action="store_true",
        help="PATH claims torch's stable ABI: each --against is one torch release it must load on, "
        "and it may import only torch's stable C functions (aoti_torch_*, torch_*)",
    )
    parser.add_argument(
        "--expect-archs",
        metavar="LIST",
        help="with --torch-free: the GPU code PATH must carry, e.g. '80;90;100;120+PTX'",
    )
    parser.add_argument(
        "--exports",
        metavar="PATTERNS",
        help="with --torch-free: the only exported names allowed, as shell patterns on demangled base names, "
        f"e.g. '{FLASH_ATTN.kernel_exports}'",
    )
    parser.add_argument(
        "--glibc", metavar="X.Y", help="oldest glibc the binary must run on (the target sysroot's), e.g. 2.28"
    )
    parser.add_argument("--platform", choices=sorted(PLATFORM_MACHINES), help="conda platform the binary is for")
    parser.add_argument("--json", action="store_true", help="print the versioned JSON report instead of text")


def execute(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    if args.torch_free:
        return _torch_free(args, started)
    if not args.against:
        raise FaforgeError(
            "check-abi needs a torch to check against, or --torch-free",
            hint="pass --against DIR (torch/lib, site-packages or a prefix), "
            "or --torch-free for a binary that must not use torch",
        )
    if args.expect_archs is not None or args.exports is not None:
        raise FaforgeError(
            "--expect-archs and --exports go with --torch-free (the torch check reports GPU code without judging it)",
            hint="add --torch-free, or drop them",
        )
    for folder in args.library_dir:
        with paths.user_path("--library-dir", folder):
            if not folder.is_dir():
                raise FaforgeError(
                    f"--library-dir {folder} {why_not_a_folder(folder)}",
                    hint="pass the folder holding the library (e.g. an installed kernel package's lib/)",
                )
    verdict: StableVerdict | Verdict
    if args.stable_abi:
        if args.glibc:
            raise FaforgeError("--glibc goes with a check against one torch", hint="drop --glibc, or drop --stable-abi")
        verdict = check_stable(args.path, args.against, platform=args.platform, library_dirs=args.library_dir)
        lines = render_stable_text(verdict)
    else:
        # The torch range the binary's imports date it to (doctor's
        # table) decides which side of a layout break it is on.
        verdict = check_path(
            args.path,
            args.against,
            glibc=args.glibc,
            platform=args.platform,
            library_dirs=args.library_dir,
            dating=dating(default_table()),
        )
        lines = render_text(verdict)
    if args.json:
        json.dump(verdict.to_json(), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(lines))
        print(f"checked in {time.perf_counter() - started:.2f}s")
    if verdict.ok:
        return EXIT_OK
    return EXIT_SKIPPED if verdict.verdict == CANNOT_TELL else EXIT_PROBLEMS


def _torch_free(args: argparse.Namespace, started: float) -> int:
    if args.against or args.glibc or args.platform or args.library_dir or args.stable_abi:
        raise FaforgeError(
            "--torch-free checks PATH on its own",
            hint="drop --against, --library-dir, --glibc, --platform and --stable-abi",
        )
    report = torchfree.check_torch_free(args.path, expect_archs=args.expect_archs, exports=args.exports)
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(torchfree.render_text(report)))
        print(f"checked in {time.perf_counter() - started:.2f}s")
    return EXIT_OK if report.ok else EXIT_PROBLEMS
