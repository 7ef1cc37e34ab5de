"""One `faforge build` run: which family each id is of, its jobs, checked before any build
(faforge.release.build.jobs and each family's `build`, faforge.release.build.stage.BuildFamily), and running
their builds in order, numbered as one run: every family's packages, then what comes after them (a pip cell's
wheels read the kernel packages this run built). One failure never stops the others.
The command only parses and prints: progress lines go through the `Reporter` it passes (faforge.progress),
so this layer prints nothing itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from contextlib import ExitStack

from faforge import paths
from faforge.channel.repodata import channel_url
from faforge.errors import FaforgeError
from faforge.matrix import Matrix, load_matrix
from faforge.matrix.render import SourceOverride
from faforge.release.build.jobs import jobs_from_plan, require_known_ids
from faforge.release.build.pip import WheelBuild
from faforge.release.build.stage import BuildFamily, BuildRequest, BuildWhere, listed
from faforge.release.build.steps import CHANNEL_ALIAS_ENV, CellBuild, parse_channel_aliases
from faforge.release.reporter import Reporter


def channel_aliases(matrix: Matrix, cli_entries: list[str]) -> dict[str, str]:
    """FAFORGE_CHANNEL_ALIAS, then --channel-alias over it; checked against the worlds' channels."""
    known = {channel for world in matrix.table.worlds.values() for channel in world.channels}
    from_env = parse_channel_aliases(os.environ.get(CHANNEL_ALIAS_ENV, "").split(), known, origin=CHANNEL_ALIAS_ENV)
    return {**from_env, **parse_channel_aliases(cli_entries, known)}


def extra_channel(value: str) -> str:
    """An --extra-channel checked before any build: a URL, a name, or a folder that exists."""
    return channel_url(
        value, "--extra-channel", if_empty="name the folder or URL holding the kernel packages, or leave the option out"
    )


def run_build(request: BuildRequest, report: Reporter, families: Sequence[BuildFamily]) -> list[CellBuild | WheelBuild]:
    """Check the request, then build its steps in order (each family's packages in the order of `families`,
    then the builds that come after them); one failure never stops the others."""
    wanted = [(c, request.part) for c in request.cells] + (jobs_from_plan(request.plan) if request.plan else [])
    if not wanted:
        raise FaforgeError(
            "nothing to build", hint=f"name {listed([f.words.named for f in families], ' or ')}, or pass --plan FILE"
        )
    matrix = load_matrix()
    aliases = channel_aliases(matrix, request.channel_alias)
    extra_channels = [extra_channel(value) for value in request.extra_channel]
    source = SourceOverride.from_sdist(request.source) if request.source else None
    owners = require_known_ids(matrix, [key for key, _ in wanted], families)
    jobs = [
        (family, family.jobs(matrix, [(key, part) for key, part in wanted if owners[key] is family], request, source))
        for family in families
    ]
    sourced = [family.words.built for family, family_jobs in jobs if family_jobs.from_recipe]
    if source and len(sourced) > 1:
        raise FaforgeError(
            f"--source replaces one recipe's source, but these jobs build {listed(sourced, ' and ')}",
            hint="build each family in its own call, each with its own --source",
        )
    output_dir = paths.output_dir(request.output_dir, "--output-dir").resolve()
    log_dir = paths.output_dir(
        request.log_dir or output_dir / "logs", "--log-dir" if request.log_dir else "--output-dir"
    ).resolve()
    where = BuildWhere(output_dir=output_dir, log_dir=log_dir, channel_aliases=aliases, extra_channels=extra_channels)
    results: list[CellBuild | WheelBuild] = []
    with ExitStack() as stack:
        batches = [batch for _, family_jobs in jobs for batch in family_jobs.batches(where, stack)]
        total, first = sum(batch.count for batch in batches), 1
        for batch in sorted(batches, key=lambda b: b.after_packages):  # stable: each family's order stays
            results += batch.run(report, first, total)
            first += batch.count
    return results
