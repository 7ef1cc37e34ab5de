"""The GPU suite's command line: `faforge test-gpu`'s options and summary, and the same run where faforge's CLI is
not installed.

`faforge test-gpu` calls `execute()`. A conda recipe's test environment, which has
torch, pytest, einops and flash_attn but none of faforge's own dependencies,
runs the same thing as

    PYTHONPATH=DIR python -m faforge.gpu.run_suite --recipe-test [--report-dir OUT]

where DIR holds the files in RECIPE_TEST_FILES (the GPU package, which needs only
the standard library, plus faforge.abi's ELF/fatbin reader for the SASS/PTX
check, which needs pyelftools: the recipe's GPU test lists it).
`--recipe-test` turns "skipped" (3) into exit 0 with a marked line, so that a
build machine without a GPU still produces the package and its log says it was
not verified. Running the suite and judging its outcome is faforge.gpu.suite_run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from faforge.errors import EXIT_OK, EXIT_SKIPPED, FaforgeError
from faforge.gpu import builtin
from faforge.gpu.coverage import format_coverage
from faforge.gpu.gate import DECLARED_ARCHS_ENV, DECLARED_HEAD_DIMS_ENV, declaration, evaluate
from faforge.gpu.stage import GpuFamily, load
from faforge.gpu.suite_run import run

# The files (relative to the folder holding faforge/) that the line above needs; nothing else of faforge.
RECIPE_TEST_FILES = (
    "faforge/__init__.py",
    "faforge/errors.py",
    "faforge/family.py",
    "faforge/abi/__init__.py",
    "faforge/abi/demangle.py",
    "faforge/abi/elf.py",
    "faforge/abi/elf_file.py",
    "faforge/abi/elf_symbols.py",
    "faforge/abi/elf_versions.py",
    "faforge/abi/fatbin.py",
    "faforge/gpu/__init__.py",
    "faforge/gpu/builtin.py",
    "faforge/gpu/compat.py",
    "faforge/gpu/coverage.py",
    "faforge/gpu/dispatch.py",
    "faforge/gpu/gate.py",
    "faforge/gpu/junit.py",
    "faforge/gpu/reference.py",
    "faforge/gpu/run_suite.py",
    "faforge/gpu/stage.py",
    "faforge/gpu/suite_child.py",
    "faforge/gpu/suite_hooks.py",
    "faforge/gpu/suite_run.py",
    "faforge/gpu/suite/__init__.py",
    "faforge/gpu/suite/cases.py",
    "faforge/gpu/suite/conftest.py",
    "faforge/gpu/suite/harness.py",
    "faforge/gpu/suite/test_attention.py",
    "faforge/gpu/suite/test_declaration.py",
    "faforge/gpu/suite/test_dropout.py",
    "faforge/gpu/suite/test_kvcache.py",
    "faforge/untrusted.py",
    "faforge/kernels/__init__.py",
    "faforge/kernels/tus.py",
)
# What a build log shows when the recipe test could not verify anything (no GPU on the build machine).
RECIPE_SKIP_MARK = "faforge-gpu-gate: skipped:"


def format_summary(summary: dict) -> str:
    """The closing lines a person reads: counts, and the reason when nothing was verified."""
    counts = summary["counts"]
    line = (
        f"faforge GPU suite: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['error']} errors, {counts['skipped']} skipped in {summary['duration_s']:.1f}s"
    )
    lines = [line, f"{summary['status'].upper()}" + (f": {summary['reason']}" if summary["reason"] else "")]
    lines += [f"defect: {defect}" for defect in summary["gate"]["defects"]]
    lines += [f"note: {note}" for note in summary["gate"]["notes"]]
    if summary.get("kernel_coverage"):
        lines += format_coverage(summary["kernel_coverage"])
    if summary["report_dir"]:
        lines.append(f"report: {summary['report_dir']}/summary.json, junit.xml, pytest.log")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser, families: Sequence[GpuFamily] = ()) -> None:
    """Options shared by `faforge test-gpu` (`families`: those with a GPU suite) and `python -m
    faforge.gpu.run_suite` (no families: --family names a package, faforge.gpu.stage.load finds its suite)."""
    default = families[0].package if families else builtin.package
    notes = [f"{f.package} declares its contents in {f.declares_in}" for f in families if f.declares_in]
    parser.add_argument(
        "--family",
        choices=[f.package for f in families] or None,
        default=default,
        help="; ".join([f"which installed package to test (default {default})", *notes]),
    )
    parser.add_argument("--report-dir", type=Path, help="write junit.xml, summary.json and pytest.log there")
    parser.add_argument(
        "--json", action="store_true", help="print the summary as JSON (schema: tests/schemas/test-gpu.json)"
    )
    parser.add_argument(
        "--time-cap-s", type=float, help="interrupt the suite after this many seconds; the reports are still written"
    )
    parser.add_argument(
        "--declared-archs",
        help=f"the package's arch list, e.g. '80;90;120+PTX' (env {DECLARED_ARCHS_ENV}); "
        "no code for a declared GPU fails (1) instead of skipping (3)",
    )
    parser.add_argument(
        "--declared-head-dims",
        help="the package's head dims, e.g. 32,64,96,128,192,256 (env "
        f"{DECLARED_HEAD_DIMS_ENV}; default: {builtin.package} 2's)",
    )
    parser.add_argument(
        "pytest_args", nargs="*", metavar="PYTEST_ARG", help="passed to pytest after `--`, e.g. -- -k dense"
    )


def execute(args: argparse.Namespace, families: Sequence[GpuFamily] = ()) -> int:
    """Run --family's suite (one of `families`, else found by faforge.gpu.stage.load), print the summary (JSON
    or text; pytest's output goes to stderr with --json), return the exit code."""
    if args.time_cap_s is not None and not (math.isfinite(args.time_cap_s) and args.time_cap_s > 0):
        raise FaforgeError(
            "--time-cap-s must be a finite number of seconds above 0",
            input=f"--time-cap-s {args.time_cap_s}",
            hint="e.g. --time-cap-s 600",
        )
    family = next((f for f in families if f.package == args.family), None) or load(args.family)
    if family.declares_in and (args.declared_archs or args.declared_head_dims):
        raise FaforgeError(
            f"--declared-archs/--declared-head-dims are for {builtin.package}",
            input=f"--family {args.family}",
            hint=f"{family.package} declares its GPU code and TUs in its {family.declares_in}; drop the options",
        )
    for value, name in ((args.declared_archs, DECLARED_ARCHS_ENV), (args.declared_head_dims, DECLARED_HEAD_DIMS_ENV)):
        if value is not None:
            os.environ[name] = value  # read by the gate here and in the child pytest
    try:
        declaration()  # a declaration that does not parse is bad input (2) on any machine, not "no GPU" (3)
        evaluate.cache_clear()
        evaluate()
    except ValueError as exc:
        raise FaforgeError(
            str(exc), hint="e.g. --declared-archs '80;90;120+PTX' --declared-head-dims 32,64,96,128,192,256"
        ) from None
    output = sys.stderr if args.json else sys.stdout
    summary = run(args.report_dir, tuple(args.pytest_args), output=output, time_cap_s=args.time_cap_s, family=family)
    print(json.dumps(summary, indent=2) if args.json else format_summary(summary))
    return summary["exit_code"]


def main(argv: list[str] | None = None) -> int:
    """`python -m faforge.gpu.run_suite`: `faforge test-gpu` for environments without faforge's CLI."""
    parser = argparse.ArgumentParser(prog="python -m faforge.gpu.run_suite", description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument(
        "--recipe-test",
        action="store_true",
        help="for a conda recipe's test section on build machines without a GPU: exit 0 instead of 3 when nothing "
        f"could be verified, after printing a line that starts with {RECIPE_SKIP_MARK!r}",
    )
    args = parser.parse_args(argv)
    try:
        exit_code = execute(args)
    except FaforgeError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if args.recipe_test and exit_code == EXIT_SKIPPED:
        print(f"{RECIPE_SKIP_MARK} GPU tests skipped, package not verified on a GPU (exit 3 mapped to 0 for the build)")
        return EXIT_OK
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
