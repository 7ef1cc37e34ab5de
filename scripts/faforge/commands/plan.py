"""Plan CI builds: each family's packages minus what a channel holds, as GitHub Actions matrix chunks.

Each chunk ({"include": [...]}) is directly usable as `strategy.matrix`. The families
(faforge.families.registry) are handed to the plan (faforge.release.plan.stage), which asks each for its stages
and jobs (faforge.families.<name>.plan:
flash-attn's kernel packages, cells and pip cells, minus the pip cells whose wheels the wheel index `--index`
holds; every other family's packages); the text shows each family's tables and lines, then the runner time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from urllib.parse import urlsplit

from faforge import atomic, paths, progress
from faforge.channel.repodata import channel_url
from faforge.errors import EXIT_OK, FaforgeError, why_not_a_folder
from faforge.families.registry import FAMILIES
from faforge.matrix.releases import PLATFORMS
from faforge.options import int_range
from faforge.release.plan.reuse import plan_reusing_objects, read_cached
from faforge.release.plan.run import github_outputs, plan_builds
from faforge.release.plan.stage import Plan
from faforge.table import format_table

STAGE_NAMES = ", ".join(stage for family in FAMILIES for stage in family.plan.stages)


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
        help=f"also write <stage>-N chunk outputs and their counts for a workflow (stages: {STAGE_NAMES}; "
        'e.g. "$GITHUB_OUTPUT")',
    )
    parser.add_argument(
        "--cached-objects",
        metavar="FILE",
        help="cache keys CI holds, one a line (`gh cache list --key ccache- --json key --jq '.[].key'`): a "
        "package whose objects key is listed is linked and packed from them, compiling no TU "
        "(faforge.release.plan.reuse); the --github-output `objects` names each package's key",
    )
    parser.add_argument(
        "--max-chunks",
        type=int_range(1, 256),
        default=2,
        metavar="N",
        help="chunks per stage the workflow has jobs for (default 2); more is an error, not a silent drop",
    )


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
    cached = frozenset() if args.cached_objects is None else read_cached(args.cached_objects)
    plan = plan_builds(
        FAMILIES,
        platform=args.platform,
        channel=channel,
        given=args.channel,
        new_channel_ok=args.new_channel_ok,
        max_chunks=args.max_chunks,
        report=progress,
        index=index,
        objects=args.github_output is not None or args.cached_objects is not None,
    )
    plan, objects = plan_reusing_objects(plan, cached)
    data = plan.to_json()
    if args.output:
        with paths.user_path("--output", args.output):
            atomic.write_text(args.output, json.dumps(data, indent=2) + "\n")
    if args.github_output is not None:
        with paths.user_path("--github-output", args.github_output), open(args.github_output, "a") as out:
            objects_line = f"objects={json.dumps(objects, separators=(',', ':'))}\n"
            out.write(github_outputs(data, plan.stages, args.max_chunks) + objects_line)
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    print_text(plan)
    return EXIT_OK


def print_text(plan: Plan) -> None:
    """Each family's tables, the job table, each family's lines, the runner time, then the stale packages."""
    for part in plan.parts:
        for table in part.tables:
            print(table)
    rows = [
        [stage, j["name"], j["part"], j["runs-on"], j["timeout-minutes"]]
        for stage, jobs in plan.jobs.items()
        for j in jobs
    ]
    if rows:
        print(format_table(["stage", "job", "part", "runner", "timeout (min)"], rows))
    for part in plan.parts:
        for line in part.lines:
            print(line)
    print(
        f"estimated runner time: {plan.runner_minutes / 60:.1f} "
        f"hours ({plan.runner_minutes} minutes: every job's estimate "
        "from variants/build-cost.yaml, setup and safety factor "
        f"included{''.join(part.estimate for part in plan.parts)})"
    )
    for part in plan.parts:
        for line in part.notes:
            print(line)
    if plan.stale:
        print(
            f"{len(plan.stale)} packages in the channel were built "
            f"from other inputs and are rebuilt: {' '.join(plan.stale)}"
        )
