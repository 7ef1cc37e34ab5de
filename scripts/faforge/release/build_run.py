"""One `faforge build` run: which output each job renders, in which order, and running them (which jobs the
request means, checked before any build: faforge.release.build_jobs).

A job is a cell and a part (faforge.release.cost): `kernels`, a kernel piece, `kernels-link`,
`cell`, or `all`. An `all` job of a recipe with a kernel-package output becomes two steps, the
cell's kernel package (once per kernel key in a run) and then its flash-attn, which finds it in the
output dir: rattler-build indexes its output dir and solves from it as a channel. A cell whose
kernel package failed is not built. A job may also be an FA3 package (faforge.families.flash_attn_3.matrix),
whole (`all`) or one of its TU pieces, from recipes/flash-attn-3 and its platform's generated variant file. A pip
cell (pypi/<platform>/...) builds its kernel package's parts here as a conda cell does, and its wheels
(`wheel`, or `all`: its kernel package first when none is found) through faforge.release.pip_build, after the rest.
The command only parses and prints: progress lines go through
the `Reporter` it passes (faforge.progress), so this layer prints nothing itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faforge import paths
from faforge.channel.repodata import channel_url
from faforge.errors import FaforgeError, why_not_a_file
from faforge.families.flash_attn_3.plan import FA3_PART
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.matrix import Matrix, load_matrix
from faforge.matrix.cells import Cell
from faforge.matrix.kernels import KERNEL_PACKAGE, kernel_key
from faforge.matrix.pip_builds import pip_builds
from faforge.matrix.render import (
    RenderedCell,
    SourceOverride,
    recipe_file,
    recipe_output_names,
    render_cells,
    render_kernel_output,
)
from faforge.matrix.render_packages import RenderedPackage as RenderedFa3
from faforge.release.build import (
    CHANNEL_ALIAS_ENV,
    TUS_ENV,
    CellBuild,
    build_cell,
    fa3_recipe,
    parse_channel_aliases,
    render_fa3,
)
from faforge.release.build_jobs import Fa3Estimator, build_steps, fa3_jobs, jobs_from_plan, piece_tus, require_known_ids
from faforge.release.cost import CELL_PART, KERNELS_LINK_PART, KERNELS_PART
from faforge.release.package import read_package
from faforge.release.pip_build import WheelBuild, build_wheels
from faforge.release.pip_inputs import WheelWhere, cuda_toolkit, match_given
from faforge.release.pip_plan import WHEEL_PART
from faforge.release.pip_target import cross_target
from faforge.release.reporter import Reporter

if TYPE_CHECKING:
    from faforge.matrix.pip_builds import PipBuild


@dataclass(frozen=True)
class BuildRequest:
    """What `faforge build` was asked, its options as given (checked here, in this order)."""

    cells: list[str]
    part: str
    plan: str | None
    output_dir: Path
    log_dir: Path | None
    source: Path | None
    channel_alias: list[str]
    extra_channel: list[str]
    # Pip cells' wheels only (faforge.release.pip_build): their kernel packages given, the channel that holds
    # them, and the CUDA toolkit the glue compiles with.
    kernel_package: list[Path] = field(default_factory=list)
    kernel_channel: str | None = None
    cuda_home: Path | None = None
    torch_site: Path | None = None  # a linux-aarch64 pip cell's aarch64 torch (a cross build)
    target_python: Path | None = None  # and its aarch64 CPython


def piece_env(tus: tuple[str, ...]) -> None:
    """A recipe reads a piece's TUs at render time (env.get), so set them (or clear them) before rendering."""
    if tus:
        os.environ[TUS_ENV] = " ".join(tus)
    else:
        os.environ.pop(TUS_ENV, None)


def render_for_part(cell: Cell, part: str, tus: tuple[str, ...], matrix: Matrix, recipe_path: Path) -> RenderedCell:
    """The output a job builds: the kernel package for `kernels`, `kernels-link` and pieces, else the
    cell's flash-attn."""
    piece_env(tus)
    if tus or part in (KERNELS_PART, KERNELS_LINK_PART):
        return render_kernel_output(cell, recipe_path, matrix.variants_dir)
    return render_cells([cell], recipe_path, matrix.variants_dir)[0]


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


def _build_step(title: str, rendered: RenderedCell | RenderedFa3, report: Reporter, **build: Any) -> CellBuild:
    """One build with its progress lines; a failure is warned about, never raised."""
    with report.step(title) as state:
        result = build_cell(rendered, live=lambda line: report.say(f"  {title}: {line}"), **build)
        state.failed = result.status == "failed"
    if state.failed:
        report.warn(f"{result.cell} failed: {result.error}; log: {result.log}")
    return result


def pip_jobs(
    matrix: Matrix, wanted: list[tuple[str, str]], request: BuildRequest, source: SourceOverride | None
) -> tuple[list[tuple[PipBuild, str]], WheelWhere | None]:
    """The pip cells' wheel jobs among the wanted ones (part `all` or `wheel`), each once, and where they read and
    write, every option checked before any build: the kernel packages given, the CUDA toolkit of each CUDA."""
    pip_ids = {c.id for c in matrix.pip_cells}
    asked = list(dict.fromkeys((key, part) for key, part in wanted if key in pip_ids and part in ("all", WHEEL_PART)))
    for key, part in wanted:
        if part == CELL_PART and key in pip_ids:
            raise FaforgeError(
                f"--part {CELL_PART}: {key} is a pip cell; its own job "
                f"is --part {WHEEL_PART} (its glue and kernel wheels)",
                hint=f"--part {WHEEL_PART}, or --part all to build its kernel package first",
                input=key,
            )
    if not asked:
        for option, value in (
            ("--kernel-package", request.kernel_package),
            ("--kernel-channel", request.kernel_channel),
            ("--cuda-home", request.cuda_home),
            ("--torch-site", request.torch_site),
            ("--target-python", request.target_python),
        ):
            if value:
                raise FaforgeError(
                    f"{option} goes with the wheels of a pip cell (pypi/...), and these jobs build none",
                    input=option,
                    hint=f"drop {option}, or name a pip cell (`faforge matrix --world pypi`)",
                )
        return [], None
    builds = {b.cell.id: b for b in pip_builds(matrix)}
    jobs = [(builds[key], part) for key, part in asked]
    given = []
    for path in request.kernel_package:
        with paths.user_path("--kernel-package", path):
            if not Path(path).is_file():
                raise FaforgeError(
                    f"--kernel-package {path} {why_not_a_file(Path(path))}",
                    input=str(path),
                    hint=f"pass the {KERNEL_PACKAGE} .conda its kernel job made",
                )
        given.append(read_package(Path(path)))
    match_given([b for b, _ in jobs], tuple(given))
    homes = {cuda: cuda_toolkit(request.cuda_home, cuda) for cuda in sorted({b.cell.cuda for b, _ in jobs})}
    cross = cross_target([b for b, _ in jobs], request.torch_site, request.target_python, next(iter(homes.values())))
    kernel_channel = (
        None
        if request.kernel_channel is None
        else channel_url(
            request.kernel_channel,
            "--kernel-channel",
            if_empty="name the channel its kernel job published to, or leave the option out",
        )
    )
    return jobs, WheelWhere(
        output_dir=Path(),
        log_dir=Path(),
        source=source,
        source_path=request.source.resolve() if request.source else None,
        kernel_packages=tuple(given),
        kernel_channel=kernel_channel,
        cuda_home=request.cuda_home,
        cross=cross,
    )


def run_build(
    request: BuildRequest, report: Reporter, fa3_pieces: Fa3Estimator | None = None
) -> list[CellBuild | WheelBuild]:
    """Check the request, then build its steps in order (the cells' and kernel packages', then the FA3
    packages', then the pip cells' wheels); one failure never stops the others. `fa3_pieces` estimates FA3
    packages' jobs, as for faforge plan, to find an FA3 piece's TUs."""
    wanted = [(c, request.part) for c in request.cells] + (jobs_from_plan(request.plan) if request.plan else [])
    if not wanted:
        raise FaforgeError(
            "nothing to build",
            hint=f"name cells (see `faforge matrix`) or {FLASH_ATTN_3.package} packages "
            "(`faforge matrix --fa3`), or pass --plan FILE",
        )
    matrix = load_matrix()
    aliases = channel_aliases(matrix, request.channel_alias)
    extra_channels = [extra_channel(value) for value in request.extra_channel]
    source = SourceOverride.from_sdist(request.source) if request.source else None
    require_known_ids(matrix, [key for key, _ in wanted])
    fa3 = fa3_jobs(matrix, wanted, fa3_pieces)
    fa3_ids = {p.id for p, _, _ in fa3}
    wheels, wheel_where = pip_jobs(matrix, wanted, request, source)
    wheel_ids = {(b.cell.id, part) for b, part in wheels}
    wanted = [(key, part) for key, part in wanted if key not in fa3_ids and (key, part) not in wheel_ids]
    if source and fa3 and wanted:
        raise FaforgeError(
            f"--source replaces one recipe's source, but these jobs build {FLASH_ATTN.package} cells and "
            f"{FLASH_ATTN_3.package} packages",
            hint="build each family in its own call, each with its own --source",
        )
    cells = {
        c.id: c for c in [*matrix.cells, *matrix.pip_cells]
    }  # a pip cell's jobs here are its kernel package's parts
    jobs = [(cells[cell_id], part, piece_tus(cells[cell_id], part)) for cell_id, part in wanted]
    output_dir = paths.output_dir(request.output_dir, "--output-dir").resolve()
    log_dir = paths.output_dir(
        request.log_dir or output_dir / "logs", "--log-dir" if request.log_dir else "--output-dir"
    ).resolve()
    where = {"output_dir": output_dir, "log_dir": log_dir, "channel_aliases": aliases, "extra_channels": extra_channels}
    results: list[CellBuild | WheelBuild] = []
    with (
        recipe_file(matrix.recipe_path, source if jobs else None) as recipe_path,
        recipe_file(fa3_recipe(matrix.variants_dir), source if fa3 else None) as fa3_recipe_path,
    ):
        kernels_in_recipe = KERNEL_PACKAGE in recipe_output_names(recipe_path)
        steps = build_steps(jobs, kernels_in_recipe)
        total = len(steps) + len(fa3) + len(wheels)
        kernel_failed: dict = {}  # kernel key -> its failed build, which its cells' steps inherit
        for i, (cell, part, tus) in enumerate(steps, 1):
            title = f"[{i}/{total}] {cell.id}" + ("" if part == "all" else f" [{part}]")
            if (tus or part in (KERNELS_PART, KERNELS_LINK_PART)) and not kernels_in_recipe:
                # The plan schedules kernel packages; a recipe without that output (one whose build
                # script compiles the kernel library inside each cell's package) has nothing to do here.
                report.say(
                    f"{title}: {recipe_path.name} has no {KERNEL_PACKAGE} output, "
                    "so each cell's job compiles its kernels; nothing to build"
                )
                results.append(
                    CellBuild(cell=cell.id, part=part, status="in-cell", seconds=0.0, package=None, log=log_dir / "-")
                )
                continue
            if part == CELL_PART and kernel_key(cell) in kernel_failed:
                failed = kernel_failed[kernel_key(cell)]
                report.warn(f"{title}: not built: its kernel package failed; log: {failed.log}")
                results.append(
                    CellBuild(
                        cell=cell.id,
                        part=part,
                        status="failed",
                        seconds=0.0,
                        package=None,
                        log=failed.log,
                        error="its kernel package failed to build",
                    )
                )
                continue
            result = _build_step(
                title, render_for_part(cell, part, tus, matrix, recipe_path), report, part=part, tus=tus, **where
            )
            if result.status == "failed" and part == KERNELS_PART:
                kernel_failed[kernel_key(cell)] = result
            results.append(result)
        # FlashAttention-3: each package (or piece) from recipes/flash-attn-3 and its platform's generated variant file.
        for i, (package, part, tus) in enumerate(fa3, len(steps) + 1):
            piece_env(tus)
            rendered = render_fa3([package], fa3_recipe_path, matrix.variants_dir)[0]
            title = f"[{i}/{total}] {FLASH_ATTN_3.package} {package.id}" + ("" if part == FA3_PART else f" [{part}]")
            results.append(_build_step(title, rendered, report, part=part, tus=tus, **where))
    # After the kernel packages this run built, which they find in the output dir.
    if wheels and wheel_where is not None:
        wheel_where = replace(
            wheel_where, output_dir=output_dir, log_dir=log_dir, channel_aliases=aliases, extra_channels=extra_channels
        )
        results += build_wheels(wheels, matrix, wheel_where, report, first=total - len(wheels) + 1, total=total)
    return results
