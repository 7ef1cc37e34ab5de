"""`faforge plan`'s work: the platform's cells, pip cells and FA3 packages, what the channel and the wheel index
already hold, the plan, and its chunks checked against the
workflow's chunk jobs; faforge.release.plan is the pure part."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from faforge.channel.repodata import ChannelNotFound, query
from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.build import recipe as fa3_recipe
from faforge.families.flash_attn_3.build import render as render_fa3
from faforge.family import FLASH_ATTN_3
from faforge.matrix import load_matrix
from faforge.matrix.kernels import FLASH_ATTN_PACKAGE, KERNEL_PACKAGE
from faforge.matrix.pip_builds import PipBuild, pip_builds
from faforge.matrix.releases import PLATFORMS
from faforge.matrix.render import RenderedCell, RenderedFa3
from faforge.matrix.render_cache import selected_cells
from faforge.release.cost import load_build_cost
from faforge.release.pip_plan import added_per_torch_release, index_holdings
from faforge.release.plan import STAGES, Plan, make_plan
from faforge.release.plan_held import present_keys
from faforge.release.plan_jobs import Fa3Estimator
from faforge.release.reporter import Reporter


def _folder_of(channel: str) -> Path | None:
    """The folder of a local (file://) channel."""
    parts = urlsplit(channel)
    return Path(url2pathname(parts.path)) if parts.scheme == "file" else None


def _holds_packages(folder: Path) -> bool:
    """Whether a channel folder without repodata holds packages (they need `faforge index`) or nothing at all."""
    return any(p.name.endswith((".conda", ".tar.bz2")) for p in folder.glob("*/*"))


def channel_holds(
    given: str, channel: str, rendered: list[RenderedCell | RenderedFa3], new_channel_ok: bool, report: Reporter
) -> set[tuple[str, str, str, str]]:
    """What the channel (`given` as the user wrote it, `channel` its URL) holds of the packages a plan builds;
    an empty or new channel holds nothing, a folder of packages without repodata is an error."""
    platforms = sorted({r.cell.platform for r in rendered}) or list(PLATFORMS)
    try:
        return present_keys(query(channel, [FLASH_ATTN_PACKAGE, KERNEL_PACKAGE, FLASH_ATTN_3.package], platforms))
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


def pip_in_index(index: str, builds: Sequence[PipBuild], report: Reporter) -> frozenset[str]:
    """The ids of the pip cells whose two wheels the index root `index` (a folder or a URL) already lists."""
    holdings = index_holdings(index, {b.cell.index_name for b in builds})
    if holdings.missing:
        report.say(
            f"faforge plan: {len(holdings.missing)} of the "
            f"{len(holdings.missing) + len(holdings.files)} indexes are not in "
            f"{index} yet (nothing published there): {' '.join(holdings.missing)}"
        )
    return frozenset(b.cell.id for b in builds if holdings.holds(b))


def plan_builds(
    *,
    platform: str,
    channel: str | None,
    given: str | None,
    new_channel_ok: bool,
    max_chunks: int,
    report: Reporter,
    fa3_pieces: Fa3Estimator | None = None,
    index: str | None = None,
) -> Plan:
    """The plan for the platform's cells, pip cells and FA3 packages (`all` for every one) minus what the channel
    (conda packages) and the wheel index root `index` (pip cells) hold (none: plan every one), refused when a stage
    needs more chunks than the workflow has jobs for. `fa3_pieces` estimates the FA3 packages' jobs
    (faforge.release.plan_jobs.fa3_parts); without it each is one job."""
    matrix = load_matrix()
    rendered = selected_cells(matrix, platform)
    fa3 = render_fa3(
        [p for p in matrix.fa3 if platform in ("all", p.platform)], fa3_recipe(matrix.variants_dir), matrix.variants_dir
    )
    pip = pip_builds(matrix, platform)
    present = (
        set()
        if given is None or channel is None
        else channel_holds(given, channel, [*rendered, *fa3], new_channel_ok, report)
    )
    in_index = frozenset() if index is None else pip_in_index(index, pip, report)
    cost = load_build_cost()
    pieces = fa3_pieces([r.package for r in fa3], cost) if fa3_pieces and fa3 else {}
    plan = make_plan(
        rendered,
        matrix.kernels,
        cost,
        present,
        given,
        fa3=fa3,
        fa3_pieces=pieces,
        pip=pip,
        pip_kernels=[k for k in matrix.pip_kernels if platform in ("all", k.key.platform)],
        pip_in_index=in_index,
        index=index,
        pip_costs=added_per_torch_release(pip, matrix.kernels, cost),
    )
    data = plan.to_json()
    for kind in STAGES:
        if len(data[kind]) > max_chunks:
            raise FaforgeError(
                f"the plan needs {len(data[kind])} {kind} chunks of at most "
                f"{plan.chunk_size} jobs, but the workflow has {max_chunks}",
                hint="add chunk jobs to .github/workflows/build.yml and pass "
                "--max-chunks, or build fewer cells per run (--platform)",
            )
    return plan


def github_outputs(data: dict, max_chunks: int) -> str:
    """The workflow's step outputs: each stage's chunk count and its chunks `<stage>-N` (empty past the last)."""
    lines = []
    for kind in STAGES:
        lines.append(f"{kind}-chunks={len(data[kind])}\n")
        for i in range(max_chunks):
            value = json.dumps(data[kind][i], separators=(",", ":")) if i < len(data[kind]) else ""
            lines.append(f"{kind}-{i}={value}\n")
    return "".join(lines)
