"""Build cells through py-rattler-build, one log per cell, and print a summary table.

Cells already in the output dir are skipped (resumable); a failed cell does not stop the
others, and the exit status is 1 if any failed. Channels come from each cell's torch world
in variants/releases.yaml, or from the mirrors `--channel-alias NAME=URL` (or FAFORGE_CHANNEL_ALIAS)
points them at; `--extra-channel` adds channels searched first (where a cell's job finds its kernel
package). CONDA_OVERRIDE_CUDA is set to each cell's CUDA when unset.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from faforge import progress
from faforge.errors import EXIT_OK, EXIT_PROBLEMS
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN
from faforge.release.build.pip import WheelBuild
from faforge.release.build.run import run_build
from faforge.release.build.stage import BuildRequest, listed
from faforge.release.build.steps import CHANNEL_ALIAS_ENV, CellBuild
from faforge.table import format_table

WORDS = [family.build.words for family in FAMILIES]
# The command's description goes on with what each family's ids and parts build, then the builds that come after
# every family's packages (faforge.cli shows it in `faforge build --help` and docs/reference/cli.md).
__doc__ = " ".join(
    [(__doc__ or "").rstrip(), *(w.about for w in WORDS), *(w.about_after for w in WORDS if w.about_after)]
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "cells",
        nargs="*",
        metavar="ID",
        help=listed([item for w in WORDS for item in w.ids]),
    )
    parser.add_argument(
        "--plan", metavar="FILE", help="build the jobs of a `faforge plan --json` file, or of one of its chunks"
    )
    parser.add_argument(
        "--part",
        default="all",
        help=f"the plan job to build (its `part`: {listed([item for w in WORDS for item in w.parts])}); "
        f"default: all, a whole {listed([item for w in WORDS for item in w.whole], ' or ')}",
    )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("output"),
        help="where packages go (a channel folder); default: ./output",
    )
    parser.add_argument("--log-dir", type=Path, help="one log per cell; default: OUTPUT_DIR/logs")
    parser.add_argument(
        "--source",
        type=Path,
        metavar="SDIST",
        help=f"build {listed([w.source for w in WORDS])} (only the source entry changes)",
    )
    parser.add_argument(
        "--channel-alias",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="use URL wherever a torch world lists channel NAME (variants/releases.yaml: conda-forge, pytorch, "
        f"nvidia), e.g. a mirror or file:///srv/conda-forge; repeatable; adds to and overrides {CHANNEL_ALIAS_ENV}",
    )
    parser.add_argument(
        "--extra-channel",
        action="append",
        default=[],
        metavar="URL",
        help="a channel searched before the world's channels, e.g. the folder holding this run's kernel packages "
        "or the channel they were published to; repeatable",
    )
    wheels = parser.add_argument_group("pip cells (pypi/...): their glue and kernel wheels")
    wheels.add_argument(
        "--kernel-package",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help=f"the {FLASH_ATTN.kernel_package} .conda of a pip cell's "
        "kernel key (its kernel job's artifact); repeatable",
    )
    wheels.add_argument(
        "--kernel-channel",
        metavar="URL_OR_PATH",
        help="a channel holding the pip cells' kernel packages (an earlier run's), fetched sha256-checked",
    )
    wheels.add_argument(
        "--cuda-home",
        type=Path,
        metavar="DIR",
        help="the CUDA toolkit the glue compiles with, of the cell's "
        "CUDA release (default: the build backend's: $CUDA_HOME, $CUDA_PATH, the nvcc on PATH, /usr/local/cuda)",
    )
    wheels.add_argument(
        "--torch-site",
        type=Path,
        metavar="DIR",
        help="a linux-aarch64 pip cell (cross-built on x86_64): the site-packages holding the cell's aarch64 torch "
        "from PyPI (pip install --target DIR --no-deps --platform manylinux_2_28_aarch64 ...), read, never imported",
    )
    wheels.add_argument(
        "--target-python",
        type=Path,
        metavar="PATH",
        help="a linux-aarch64 pip cell: the aarch64 CPython executable (of the cell's Python) in its unpacked prefix, "
        "whose include/pythonX.Y and shared libpython the glue compiles and links with",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the versioned report (schema: tests/schemas/build.json)"
    )


BUILD_VERSION = 1


def report_json(results: Sequence[CellBuild | WheelBuild]) -> dict:
    """Every build of the call: what the summary table shows, and each pip cell's wheels."""
    builds = []
    for b in results:
        entry: dict[str, object] = {
            "cell": b.cell,
            "part": b.part,
            "kind": "wheel" if isinstance(b, WheelBuild) else "conda",
            "status": b.status,
            "seconds": round(b.seconds, 1),
            "package": str(b.package) if b.package else None,
            "log": str(b.log),
            "error": b.error,
            "cache": b.cache,
        }
        if isinstance(b, WheelBuild):
            entry["wheel"] = b.details or None
        builds.append(entry)
    failed = sum(1 for b in results if b.status == "failed")
    return {"version": BUILD_VERSION, "ok": len(results) - failed, "failed": failed, "builds": builds}


def execute(args: argparse.Namespace) -> int:
    request = BuildRequest(
        cells=args.cells,
        part=args.part,
        plan=args.plan,
        output_dir=args.output_dir,
        log_dir=args.log_dir,
        source=args.source,
        channel_alias=args.channel_alias,
        extra_channel=args.extra_channel,
        kernel_package=args.kernel_package,
        kernel_channel=args.kernel_channel,
        cuda_home=args.cuda_home,
        torch_site=args.torch_site,
        target_python=args.target_python,
    )
    results = run_build(request, progress, [family.build for family in FAMILIES])
    failed = [b for b in results if b.status == "failed"]
    if args.json:
        print(json.dumps(report_json(results), indent=2))
        return EXIT_PROBLEMS if failed else EXIT_OK
    rows = [
        [b.cell, b.part, b.status, f"{b.seconds:.1f}s", b.cache, b.package.name if b.package else "-", b.log]
        for b in results
    ]
    print(format_table(["cell", "part", "status", "time", "compiler cache", "package", "log"], rows))
    for b in results:
        if isinstance(b, WheelBuild) and b.kernel_wheel:
            print(
                f"  {b.cell}: kernel wheel {b.kernel_wheel.name} (the kernel package's library, only its RUNPATH set)"
            )
    print(f"\n{len(results) - len(failed)} of {len(results)} ok" + (f", {len(failed)} failed" if failed else ""))
    return EXIT_PROBLEMS if failed else EXIT_OK
