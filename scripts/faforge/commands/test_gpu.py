"""Run the GPU test suite against the installed flash_attn: exit 0 all passed, 1 any failure, 3 no usable GPU.

The suite (faforge/gpu/suite) checks first that this GPU can run the binary
(embedded SASS/PTX, CUDA's compatibility rules), then compares forward and
backward results of every kernel family with an fp32 reference. No GPU, no CUDA
torch, no flash_attn, or a binary without code for this GPU means nothing was
verified: exit 3 with the reason, never 0. Arguments after `--` go to pytest.
"""

from __future__ import annotations

import argparse

from faforge import paths
from faforge.errors import EXIT_OK
from faforge.families.registry import FAMILIES
from faforge.gpu import canary, run_suite
from faforge.gpu.stage import GpuFamily


def gpu_families() -> list[GpuFamily]:
    """The families with a GPU suite, in the registry's order (the first is --family's default)."""
    return [family.gpu for family in FAMILIES if family.gpu is not None]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    run_suite.add_arguments(parser, gpu_families())
    parser.add_argument(
        "--canary-status",
        action="store_true",
        help="only report the committed GPU canary (tests/gpu/canary/): "
        "matches its manifest? kernel inputs changed since? (exit 0)",
    )


def execute(args: argparse.Namespace) -> int:
    if args.canary_status:
        print("\n".join(canary.status_lines(paths.repo_root())))
        return EXIT_OK
    return run_suite.execute(args, gpu_families())
