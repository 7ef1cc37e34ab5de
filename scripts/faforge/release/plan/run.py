"""`faforge plan`'s work: what each family would build for the platform, what the channel already holds of it,
the plan, and its chunks checked against the workflow's chunk jobs; faforge.release.plan.stage is the pure part."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from faforge.channel.repodata import ChannelNotFound, query
from faforge.costmodel.runners import load_build_cost
from faforge.errors import FaforgeError
from faforge.matrix import load_matrix
from faforge.matrix.releases import PLATFORMS
from faforge.release.plan.held import present_keys
from faforge.release.plan.stage import Holdings, Plan, PlannedFamily, Present, Wanted, channel_names, make_plan
from faforge.release.reporter import Reporter


def _folder_of(channel: str) -> Path | None:
    """The folder of a local (file://) channel."""
    parts = urlsplit(channel)
    return Path(url2pathname(parts.path)) if parts.scheme == "file" else None


def _holds_packages(folder: Path) -> bool:
    """Whether a channel folder without repodata holds packages (they need `faforge index`) or nothing at all."""
    return any(p.name.endswith((".conda", ".tar.bz2")) for p in folder.glob("*/*"))


def channel_holds(
    given: str, channel: str, wanted: Sequence[Wanted], new_channel_ok: bool, report: Reporter
) -> Present:
    """What the channel (`given` as the user wrote it, `channel` its URL) holds of the packages a plan builds;
    an empty or new channel holds nothing, a folder of packages without repodata is an error."""
    platforms = sorted(frozenset().union(*(w.platforms for w in wanted))) or list(PLATFORMS)
    try:
        return present_keys(query(channel, channel_names(wanted), platforms))
    except ChannelNotFound as exc:
        folder = _folder_of(channel)
        if folder is not None and not _holds_packages(folder):
            report.say(f"faforge plan: {given} holds no packages yet (an empty channel); planning every cell")
        elif folder is not None:
            raise FaforgeError(
                f"{given} holds packages but no repodata.json",
                input=given,
                hint=f"index it first: `faforge index {folder}`",
            ) from None
        elif not new_channel_ok:
            raise ChannelNotFound(
                exc.message,
                hint="nothing published there yet? --new-channel-ok plans every cell; otherwise check the URL",
                exit_code=exc.exit_code,
            ) from None
        else:
            report.warn(f"{given} has no repodata yet; planning every cell ({exc.message.splitlines()[0]})")
    return set()


def plan_builds(
    families: Iterable[PlannedFamily],
    *,
    platform: str,
    channel: str | None,
    given: str | None,
    new_channel_ok: bool,
    max_chunks: int,
    report: Reporter,
    index: str | None = None,
    objects: bool = False,
) -> Plan:
    """The plan for each family's packages of the platform (`all` for every one) minus what the channel (conda
    packages) and the wheel index root `index` (pip cells) hold (none: plan every one), refused when a stage
    needs more chunks than the workflow has jobs for."""
    matrix = load_matrix()
    wanted = [family.plan.wanted(matrix, platform) for family in families]
    present: Present = (
        set() if given is None or channel is None else channel_holds(given, channel, wanted, new_channel_ok, report)
    )
    holdings = Holdings(
        present=present, cost=load_build_cost(), channel=given, index=index, report=report, objects=objects
    )
    plan = make_plan(wanted, holdings, given, index)
    data = plan.to_json()
    for kind in plan.stages:
        if len(data[kind]) > max_chunks:
            raise FaforgeError(
                f"the plan needs {len(data[kind])} {kind} chunks of at most "
                f"{plan.chunk_size} jobs, but the workflow has {max_chunks}",
                hint="add chunk jobs to .github/workflows/build.yml and pass "
                "--max-chunks, or build fewer cells per run (--platform)",
            )
    return plan


def github_outputs(data: dict, stages: Sequence[str], max_chunks: int) -> str:
    """The workflow's step outputs: each stage's chunk count and its chunks `<stage>-N` (empty past the last)."""
    lines = []
    for kind in stages:
        lines.append(f"{kind}-chunks={len(data[kind])}\n")
        for i in range(max_chunks):
            value = json.dumps(data[kind][i], separators=(",", ":")) if i < len(data[kind]) else ""
            lines.append(f"{kind}-{i}={value}\n")
    return "".join(lines)
