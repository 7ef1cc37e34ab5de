"""Plan CI builds: the matrix minus what a channel holds, as GitHub Actions matrix chunks.

Each chunk ({"include": [...]}) is directly usable as `strategy.matrix`. A cell too long for
one hosted job (variants/build-cost.yaml) becomes TU pieces in the build chunks plus a job
in the link chunks, which run after every build chunk.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from faforge import atomic, progress
from faforge.channel.repodata import ChannelNotFound, query
from faforge.commands.matrix import selected_cells
from faforge.errors import EXIT_OK, FaforgeError
from faforge.matrix.releases import PLATFORMS
from faforge.release.cost import load_build_cost
from faforge.release.plan import make_plan, present_keys
from faforge.table import format_table

PACKAGE_NAME = "flash-attn"


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
                        help="also write build-N / link-N chunk outputs and their counts for a workflow (e.g. \"$GITHUB_OUTPUT\")")
    parser.add_argument("--max-chunks", type=int, default=4, metavar="N",
                        help="chunks the workflow has jobs for (default 4); more is an error, not a silent drop")


def execute(args: argparse.Namespace) -> int:
    rendered = selected_cells(args.platform)
    present = set()
    if args.channel is not None and not args.channel.strip():  # `--channel "$FAFORGE_CHANNEL_URL"` with the variable unset
        raise FaforgeError("--channel '': empty, so no channel would be read and every cell planned",
                           hint="set the variable that names the channel, or leave --channel out to plan every cell")
    if args.channel:
        platforms = sorted({r.cell.platform for r in rendered}) or list(PLATFORMS)
        try:
            present = present_keys(query(args.channel, [PACKAGE_NAME], platforms))
        except ChannelNotFound as exc:
            if not args.new_channel_ok:
                raise ChannelNotFound(exc.message, hint="nothing published there yet? --new-channel-ok plans every cell; "
                                                        "otherwise check the URL", exit_code=exc.exit_code) from None
            progress.warn(f"{args.channel} has no repodata yet; planning every cell ({exc.message.splitlines()[0]})")
    plan = make_plan(rendered, load_build_cost(), present, args.channel)
    data = plan.to_json()
    for kind in ("build", "link"):
        if len(data[kind]) > args.max_chunks:
            raise FaforgeError(
                f"the plan needs {len(data[kind])} {kind} chunks of at most {plan.chunk_size} jobs, but the workflow has {args.max_chunks}",
                hint="add chunk jobs to .github/workflows/build.yml and pass --max-chunks, or build fewer cells per run (--platform)",
            )
    if args.output:
        atomic.write_text(args.output, json.dumps(data, indent=2) + "\n")
    if args.github_output:
        with open(args.github_output, "a") as out:
            for kind in ("build", "link"):
                out.write(f"{kind}-chunks={len(data[kind])}\n")
                for i in range(args.max_chunks):
                    value = json.dumps(data[kind][i], separators=(",", ":")) if i < len(data[kind]) else ""
                    out.write(f"{kind}-{i}={value}\n")
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    jobs = plan.build_jobs + plan.link_jobs
    rows = [[j["cell"], j["part"], j["runs-on"], j["timeout-minutes"]] for j in jobs]
    if rows:
        print(format_table(["cell", "part", "runner", "timeout (min)"], rows))
    print(f"\n{len(plan.todo)} cells to build in {len(plan.build_jobs)} build + {len(plan.link_jobs)} link jobs; "
          f"{len(plan.present)} already in {args.channel or 'no channel'}", file=sys.stdout)
    return EXIT_OK
