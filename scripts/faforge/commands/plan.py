"""Plan CI builds: the matrix minus what a channel holds, as GitHub Actions matrix chunks.

Each chunk ({"include": [...]}) is directly usable as `strategy.matrix`. Three stages run in order
(faforge.release.plan): kernel packages (whole, or TU pieces when one is too long for a hosted job,
variants/build-cost.yaml), the final link jobs of split kernel packages, then one job per cell; beside
them, the TU pieces of each FlashAttention-3 package (`faforge matrix --fa3`) too long for one job, then
one job per FA3 package. FA3's estimates are `faforge bench-build`'s (faforge.families.flash_attn_3.cost). The pip cells
(the pip world) get one wheel job each after the kernel stages (faforge.release.pip_plan), minus those whose wheels
the wheel index `--index` holds; the plan ends with the runner hours each torch release adds to CI.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from urllib.parse import urlsplit

from faforge import atomic, paths, progress
from faforge.buildcost import samples
from faforge.channel.repodata import channel_url
from faforge.errors import EXIT_OK, FaforgeError, why_not_a_folder
from faforge.families.flash_attn_3 import cost_report as fa3_report
from faforge.families.flash_attn_3.matrix import Fa3Package
from faforge.family import FLASH_ATTN_3
from faforge.matrix.inputs import FA3_INPUTS, KERNEL_INPUTS, objects_digests
from faforge.matrix.releases import PLATFORMS
from faforge.options import int_range
from faforge.release.cost import BuildCost, Part
from faforge.release.pip_plan import PIP_STAGE
from faforge.release.plan import CELL_STAGE, FA3_PIECES_STAGE, FA3_STAGE, STAGES, Plan
from faforge.release.plan_reuse import CompiledStages, plan_reusing_objects, read_cached
from faforge.release.plan_run import github_outputs, plan_builds
from faforge.table import format_table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--channel",
        metavar="URL_OR_PATH",
        help="channel whose packages need no build (folder, file://, http(s):// or a name); default: none",
    )
    parser.add_argument(
        "--new-channel-ok",
        action="store_true",
        help="a channel with no repodata yet (HTTP 404: nothing published so far) counts as empty instead of an error",
    )
    parser.add_argument(
        "--index",
        metavar="URL_OR_DIR",
        help="wheel index root whose pip cells need no build (a folder `faforge publish --index` writes, or its "
        "URL, e.g. https://faforge.github.io/wheels): a cell is "
        "there when its index lists both its wheels; default: none",
    )
    parser.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all", help="default: all")
    parser.add_argument(
        "--json", action="store_true", help="print the versioned plan (schema: tests/schemas/plan.json)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write the versioned plan to FILE for `faforge build --plan FILE`; written only when planning "
        "succeeds (a failed plan keeps the previous file), which `--json > FILE` cannot promise",
    )
    parser.add_argument(
        "--github-output",
        metavar="FILE",
        help=f"also write <stage>-N chunk outputs and their counts for a workflow (stages: {', '.join(STAGES)}; "
        'e.g. "$GITHUB_OUTPUT")',
    )
    parser.add_argument(
        "--cached-objects",
        metavar="FILE",
        help="cache keys CI holds, one a line (`gh cache list --key ccache- --json key --jq '.[].key'`): a "
        "package whose objects key is listed is linked and packed from them, compiling no TU "
        "(faforge.release.plan_reuse); the --github-output `objects` names each package's key",
    )
    parser.add_argument(
        "--max-chunks",
        type=int_range(1, 256),
        default=2,
        metavar="N",
        help="chunks per stage the workflow has jobs for (default 2); more is an error, not a silent drop",
    )


def fa3_pieces(packages: list[Fa3Package], cost: BuildCost) -> dict[str, list[Part]]:
    """Each FA3 package's jobs by id, from its timed TU classes (variants/build-measurements.yaml, the model of
    `faforge bench-build`); none without FA3 samples (each package is then one job at the runner's limit)."""
    measurements = samples.load()
    if not measurements.fa3_samples:
        return {}
    return {p.id: list(p.jobs) for p in fa3_report.report(measurements, packages, cost).packages}


# The variant values a kernel package's objects follow, besides its slug's: the recipe's kernel output reads only
# these (faforge.matrix.kernels says why).
KERNEL_VARIANT_KEYS = (
    "cuda_compiler_version",
    "cuda_archs",
    "philox_offset_bits",
    "c_compiler_version",
    "cxx_compiler_version",
    "c_stdlib_version",
)


def compiled_stages(root: Path) -> list[CompiledStages]:
    """Each compiled output's piece and final stages, with its objects digest (faforge.release.plan_reuse)."""
    digests = objects_digests(root)
    return [
        CompiledStages("kernels", "kernel_links", digests[KERNEL_INPUTS], KERNEL_VARIANT_KEYS),
        CompiledStages(FA3_PIECES_STAGE, FA3_STAGE, digests[FA3_INPUTS]),
    ]


def index_root(value: str) -> str:
    """An --index checked before any work: an http(s) URL with a host, or a folder that exists (a new root
    nothing was published to is an empty folder: `mkdir` it, as for a channel)."""
    hint = (
        "pass the folder `faforge publish --index` writes (e.g. ./wheels) "
        "or its URL, or leave --index out to plan every pip cell"
    )
    if not value.strip():
        raise FaforgeError(f"--index {value!r}: empty", input="--index", hint=hint)
    if value.startswith(("http://", "https://")):
        if not urlsplit(value).netloc or not value.isprintable() or " " in value:
            raise FaforgeError(f"--index {value!r} is not an http(s) URL of a wheel index root", input=value, hint=hint)
        return value
    if "://" in value:
        raise FaforgeError(f"--index {value}: only http:// and https:// URLs, or a folder", input=value, hint=hint)
    with paths.user_path("--index", value):
        if not Path(value).is_dir():
            raise FaforgeError(f"--index {value} {why_not_a_folder(Path(value))}", input=value, hint=hint)
    return value


def print_pip(plan: Plan, data: dict, index: str | None) -> None:
    """The pip cells' lines: how many to build, and what each torch release adds to CI."""
    where = index or "no index"
    print(
        f"{len(data['pip_to_build'])} pip cells to build in "
        f"{len(plan.jobs[PIP_STAGE])} wheel jobs (glue and kernel wheel each, "
        "from the kernel packages above: no kernel TU compiled "
        f"for pip); {len(data['pip_in_index'])} already in {where}"
    )
    if data["pip_not_built"]:
        print(
            f"{len(data['pip_not_built'])} linux-aarch64 pip cells get no job yet: {data['pip_not_built'][0]['why']} "
            "(the table below counts them: what they will cost)"
        )
    rows = [
        [
            r["torch_minor"],
            r["world"],
            r["pip_cells"],
            r["wheel_jobs"],
            len(r["new_kernel_packages"]),
            r["kernel_jobs"],
            f"{r['runner_hours']:.1f}",
        ]
        for r in data["pip_cost"]["per_torch_release"]
    ]
    if rows:
        print("\npip world: added runner hours per torch release")
        print(
            format_table(
                ["torch", "world", "pip cells", "wheel jobs", "new kernel packages", "kernel jobs", "runner hours"],
                rows,
            )
        )
        print(
            f"(a wheel job {data['pip_cost']['wheel_job_minutes']} min, as "
            "a conda cell's job; a new kernel package's jobs as planned "
            "above; both from variants/build-cost.yaml, setup and safety "
            "factor included. A kernel package a conda cell or an "
            "older torch minor needs is not counted again: it is built once and shared)"
        )


def execute(args: argparse.Namespace) -> int:
    if args.github_output is not None:  # before the work: a wrong path fails now, not after reading the channel
        paths.output_file(args.github_output, "--github-output")
    if args.output is not None:
        paths.replaceable_file(args.output, "--output")
    # A wrong folder fails before rendering; an empty one (an
    # unset $FAFORGE_CHANNEL_URL) would otherwise plan every cell.
    channel = (
        None
        if args.channel is None
        else channel_url(
            args.channel,
            "--channel",
            if_empty="set the variable that names the channel, or leave --channel out to plan every cell",
        )
    )
    index = None if args.index is None else index_root(args.index)
    plan = plan_builds(
        platform=args.platform,
        channel=channel,
        given=args.channel,
        new_channel_ok=args.new_channel_ok,
        max_chunks=args.max_chunks,
        report=progress,
        fa3_pieces=fa3_pieces,
        index=index,
    )
    stages = compiled_stages(paths.repo_root())
    cached = frozenset() if args.cached_objects is None else read_cached(args.cached_objects)
    plan, objects = plan_reusing_objects(plan, stages, cached)
    data = plan.to_json()
    if args.output:
        with paths.user_path("--output", args.output):
            atomic.write_text(args.output, json.dumps(data, indent=2) + "\n")
    if args.github_output is not None:
        with paths.user_path("--github-output", args.github_output), open(args.github_output, "a") as out:
            out.write(github_outputs(data, args.max_chunks) + f"objects={json.dumps(objects, separators=(',', ':'))}\n")
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    kernel_rows = [
        [k["id"], k["build_string_prefix"] + "*", "in the channel" if k["in_channel"] else "to build", len(k["cells"])]
        for k in data["kernel_packages"]
    ]
    if kernel_rows:
        print(
            format_table(["kernel package", "build string", "status", "cells to build that need it"], kernel_rows)
            + "\n"
        )
    fa3_rows = [
        [
            p["id"],
            p["build_string"],
            f"{p['served_torch_minors'][0]} to {p['served_torch_minors'][-1]}",
            "in the channel" if p["in_channel"] else "to build",
        ]
        for p in data[f"{FA3_STAGE}_packages"]
    ]
    if fa3_rows:
        print(
            format_table([f"{FLASH_ATTN_3.package} package", "build string", "serves torch", "status"], fa3_rows) + "\n"
        )
    rows = [
        [stage, j["name"], j["part"], j["runs-on"], j["timeout-minutes"]] for stage in STAGES for j in plan.jobs[stage]
    ]
    if rows:
        print(format_table(["stage", "job", "part", "runner", "timeout (min)"], rows))
    built = len(plan.kernels) - len(plan.kernels_in_channel)
    print(
        f"\n{len(plan.todo)} cells to build in {len(plan.jobs[CELL_STAGE])} "
        f"cell jobs, after {built} kernel packages in "
        f"{len(plan.jobs['kernels'])} + {len(plan.jobs['kernel_links'])} "
        f"link jobs ({len(plan.kernels_in_channel)} kernel packages "
        f"already there); {len(plan.present)} cells already in {args.channel or 'no channel'}",
        file=sys.stdout,
    )
    print(
        f"{len(plan.fa3_todo)} {FLASH_ATTN_3.package} packages to build in {len(plan.jobs[FA3_STAGE])} jobs, after "
        f"{len(plan.jobs[FA3_PIECES_STAGE])} piece jobs; "
        f"{len(plan.fa3_in_channel)} already in {args.channel or 'no channel'}"
    )
    print(
        f"estimated runner time: {plan.runner_minutes / 60:.1f} "
        f"hours ({plan.runner_minutes} minutes: every job's estimate "
        "from variants/build-cost.yaml, setup and safety factor "
        f"included; a {FLASH_ATTN_3.package} package's from its timed "
        "TUs, variants/build-measurements.yaml)"
    )
    print_pip(plan, data, args.index)
    if plan.stale:
        print(
            f"{len(plan.stale)} packages in the channel were built "
            f"from other inputs and are rebuilt: {' '.join(plan.stale)}"
        )
    return EXIT_OK
