"""Plan CI builds: the matrix minus what a channel holds, as GitHub Actions matrix chunks.

Each chunk ({"include": [...]}) is directly usable as `strategy.matrix`. Three stages run in order
(faforge.release.plan): kernel packages (whole, or TU pieces when one is too long for a hosted job,
variants/build-cost.yaml), the final link jobs of split kernel packages, then one job per cell; beside
them, the TU pieces of each FlashAttention-3 package (`faforge matrix --fa3`) too long for one job, then
one job per FA3 package. FA3's estimates are `faforge bench-build`'s (faforge.buildcost.fa3).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from faforge import atomic, paths, progress
from faforge.buildcost import fa3_report, samples
from faforge.channel.repodata import channel_url
from faforge.errors import EXIT_OK
from faforge.family import FLASH_ATTN_3
from faforge.matrix.releases import PLATFORMS
from faforge.options import int_range
from faforge.matrix.flash_attn_3 import Fa3Package
from faforge.release.cost import BuildCost, Part
from faforge.release.plan import CELL_STAGE, FA3_PIECES_STAGE, FA3_STAGE, STAGES
from faforge.release.plan_run import github_outputs, plan_builds
from faforge.table import format_table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--channel", metavar="URL_OR_PATH", help="channel whose packages need no build (folder, file://, http(s):// or a name); default: none")
    parser.add_argument("--new-channel-ok", action="store_true",
                        help="a channel with no repodata yet (HTTP 404: nothing published so far) counts as empty instead of an error")
    parser.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all", help="default: all")
    parser.add_argument("--json", action="store_true", help="print the versioned plan (schema: tests/schemas/plan.json)")
    parser.add_argument("--output", type=Path, metavar="FILE",
                        help="write the versioned plan to FILE for `faforge build --plan FILE`; written only when planning "
                             "succeeds (a failed plan keeps the previous file), which `--json > FILE` cannot promise")
    parser.add_argument("--github-output", metavar="FILE",
                        help=f"also write <stage>-N chunk outputs and their counts for a workflow (stages: {', '.join(STAGES)}; "
                             "e.g. \"$GITHUB_OUTPUT\")")
    parser.add_argument("--max-chunks", type=int_range(1, 256), default=2, metavar="N",
                        help="chunks per stage the workflow has jobs for (default 2); more is an error, not a silent drop")


def fa3_pieces(packages: list[Fa3Package], cost: BuildCost) -> dict[str, list[Part]]:
    """Each FA3 package's jobs by id, from its timed TU classes (variants/build-measurements.yaml, the model of
    `faforge bench-build`); none without FA3 samples (each package is then one job at the runner's limit)."""
    measurements = samples.load()
    if not measurements.fa3_samples:
        return {}
    return {p.id: list(p.jobs) for p in fa3_report.report(measurements, packages, cost).packages}


def execute(args: argparse.Namespace) -> int:
    if args.github_output is not None:  # before the work: a wrong path fails now, not after reading the channel
        paths.output_file(args.github_output, "--github-output")
    if args.output is not None:
        paths.replaceable_file(args.output, "--output")
    # A wrong folder fails before rendering; an empty one (an unset $FAFORGE_CHANNEL_URL) would otherwise plan every cell.
    channel = None if args.channel is None else channel_url(
        args.channel, "--channel", if_empty="set the variable that names the channel, or leave --channel out to plan every cell")
    plan = plan_builds(platform=args.platform, channel=channel, given=args.channel, new_channel_ok=args.new_channel_ok,
                       max_chunks=args.max_chunks, report=progress, fa3_pieces=fa3_pieces)
    data = plan.to_json()
    if args.output:
        with paths.user_path("--output", args.output):
            atomic.write_text(args.output, json.dumps(data, indent=2) + "\n")
    if args.github_output is not None:
        with paths.user_path("--github-output", args.github_output), open(args.github_output, "a") as out:
            out.write(github_outputs(data, args.max_chunks))
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    kernel_rows = [[k["id"], k["build_string_prefix"] + "*", "in the channel" if k["in_channel"] else "to build", len(k["cells"])]
                   for k in data["kernel_packages"]]
    if kernel_rows:
        print(format_table(["kernel package", "build string", "status", "cells to build that need it"], kernel_rows) + "\n")
    fa3_rows = [[p["id"], p["build_string"], f"{p['served_torch_minors'][0]} to {p['served_torch_minors'][-1]}",
                 "in the channel" if p["in_channel"] else "to build"] for p in data[f"{FA3_STAGE}_packages"]]
    if fa3_rows:
        print(format_table([f"{FLASH_ATTN_3.package} package", "build string", "serves torch", "status"], fa3_rows) + "\n")
    rows = [[stage, j["name"], j["part"], j["runs-on"], j["timeout-minutes"]] for stage in STAGES for j in plan.jobs[stage]]
    if rows:
        print(format_table(["stage", "job", "part", "runner", "timeout (min)"], rows))
    built = len(plan.kernels) - len(plan.kernels_in_channel)
    print(f"\n{len(plan.todo)} cells to build in {len(plan.jobs[CELL_STAGE])} cell jobs, after {built} kernel packages in "
          f"{len(plan.jobs['kernels'])} + {len(plan.jobs['kernel_links'])} link jobs ({len(plan.kernels_in_channel)} kernel packages "
          f"already there); {len(plan.present)} cells already in {args.channel or 'no channel'}", file=sys.stdout)
    print(f"{len(plan.fa3_todo)} {FLASH_ATTN_3.package} packages to build in {len(plan.jobs[FA3_STAGE])} jobs, after "
          f"{len(plan.jobs[FA3_PIECES_STAGE])} piece jobs; {len(plan.fa3_in_channel)} already in {args.channel or 'no channel'}")
    print(f"estimated runner time: {plan.runner_minutes / 60:.1f} hours ({plan.runner_minutes} minutes: every job's estimate "
          f"from variants/build-cost.yaml, setup and safety factor included; a {FLASH_ATTN_3.package} package's from its timed "
          "TUs, variants/build-measurements.yaml)")
    if plan.stale:
        print(f"{len(plan.stale)} packages in the channel were built from other inputs and are rebuilt: {' '.join(plan.stale)}")
    return EXIT_OK
