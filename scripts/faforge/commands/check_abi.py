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
from faforge.abi.report import render_text
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
        print("\n".join(render_text(verdict)))
        print(f"checked in {time.perf_counter() - started:.2f}s")
    return EXIT_OK if verdict.ok else EXIT_PROBLEMS
