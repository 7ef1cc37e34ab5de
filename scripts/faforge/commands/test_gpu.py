"""Run the GPU test suite against the installed flash_attn: exit 0 all passed, 1 any failure, 3 no usable GPU.

The suite (faforge/gpu/suite) checks first that this GPU can run the binary
(embedded SASS/PTX, CUDA's compatibility rules), then compares forward and
backward results of every kernel family with an fp32 reference. No GPU, no CUDA
torch, no flash_attn, or a binary without code for this GPU means nothing was
verified: exit 3 with the reason, never 0. Arguments after `--` go to pytest.
"""

from __future__ import annotations

import argparse

from faforge.gpu import run_suite


def configure_parser(parser: argparse.ArgumentParser) -> None:
    run_suite.add_arguments(parser)


def execute(args: argparse.Namespace) -> int:
    return run_suite.execute(args)
