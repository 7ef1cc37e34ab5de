"""The jobs of the matrix's cells in one `faforge build`: a cell's parts (faforge.costmodel.runners: `kernels`, a kernel
piece, `kernels-link`, `cell`, or `all`) from the cell recipe, and a pip cell's wheels (faforge.release.build.pip).

An `all` job of a recipe with a kernel-package output becomes two steps, the cell's kernel package (once per kernel
key in a run) and then its flash-attn, which finds it in the output dir: rattler-build indexes its output dir and
solves from it as a channel. A cell whose kernel package failed is not built. A pip cell builds its kernel
package's parts here as a conda cell does, and its wheels (`wheel`, or `all`: its kernel package first when none
is found) after every family's packages.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from faforge import paths
from faforge.channel.repodata import channel_url
from faforge.costmodel.runners import CELL_PART, KERNELS_LINK_PART, KERNELS_PART
from faforge.errors import FaforgeError, why_not_a_file
from faforge.matrix import Matrix
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
from faforge.release.build.jobs import build_steps, piece_tus
from faforge.release.build.pip import WheelBuild, build_wheels
from faforge.release.build.pip_inputs import WheelWhere, cuda_toolkit, match_given
from faforge.release.build.pip_target import cross_target
from faforge.release.build.stage import Batch, BuildRequest, BuildWhere
from faforge.release.build.steps import CellBuild, build_step, piece_env
from faforge.release.package import read_package
from faforge.release.plan.pip import WHEEL_PART
from faforge.release.reporter import Reporter

if TYPE_CHECKING:
    from faforge.matrix.pip_builds import PipBuild


def render_for_part(cell: Cell, part: str, tus: tuple[str, ...], matrix: Matrix, recipe_path: Path) -> RenderedCell:
    """The output a job builds: the kernel package for `kernels`, `kernels-link` and pieces, else the
    cell's flash-attn."""
    piece_env(tus)
    if tus or part in (KERNELS_PART, KERNELS_LINK_PART):
        return render_kernel_output(cell, recipe_path, matrix.variants_dir)
    return render_cells([cell], recipe_path, matrix.variants_dir)[0]


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


@dataclass(frozen=True)
class CellJobs:
    """The cells' jobs of a run (faforge.release.build.stage.FamilyJobs): their conda builds, then their wheels."""

    matrix: Matrix
    jobs: list[tuple[Cell, str, tuple[str, ...]]]
    wheels: list[tuple[PipBuild, str]]
    wheel_where: WheelWhere | None
    source: SourceOverride | None

    @property
    def from_recipe(self) -> bool:
        return bool(self.jobs)

    def batches(self, where: BuildWhere, stack: ExitStack) -> list[Batch]:
        batches = []
        if self.jobs:
            recipe_path = stack.enter_context(recipe_file(self.matrix.recipe_path, self.source))
            kernels_in_recipe = KERNEL_PACKAGE in recipe_output_names(recipe_path)
            steps = build_steps(self.jobs, kernels_in_recipe)
            batches.append(
                Batch(
                    len(steps),
                    lambda report, first, total: self._conda(
                        steps, recipe_path, kernels_in_recipe, where, report, first, total
                    ),
                )
            )
        if self.wheels and self.wheel_where is not None:
            wheel_where = replace(
                self.wheel_where,
                output_dir=where.output_dir,
                log_dir=where.log_dir,
                channel_aliases=where.channel_aliases,
                extra_channels=where.extra_channels,
            )
            batches.append(
                Batch(
                    len(self.wheels),
                    lambda report, first, total: list(
                        build_wheels(self.wheels, self.matrix, wheel_where, report, first=first, total=total)
                    ),
                    after_packages=True,  # they find the kernel packages this run built in the output dir
                )
            )
        return batches

    def _conda(
        self,
        steps: list[tuple[Cell, str, tuple[str, ...]]],
        recipe_path: Path,
        kernels_in_recipe: bool,
        where: BuildWhere,
        report: Reporter,
        first: int,
        total: int,
    ) -> list[CellBuild | WheelBuild]:
        results: list[CellBuild | WheelBuild] = []
        kernel_failed: dict = {}  # kernel key -> its failed build, which its cells' steps inherit
        for i, (cell, part, tus) in enumerate(steps, first):
            title = f"[{i}/{total}] {cell.id}" + ("" if part == "all" else f" [{part}]")
            if (tus or part in (KERNELS_PART, KERNELS_LINK_PART)) and not kernels_in_recipe:
                # The plan schedules kernel packages; a recipe without that output (one whose build
                # script compiles the kernel library inside each cell's package) has nothing to do here.
                report.say(
                    f"{title}: {recipe_path.name} has no {KERNEL_PACKAGE} output, "
                    "so each cell's job compiles its kernels; nothing to build"
                )
                results.append(
                    CellBuild(
                        cell=cell.id, part=part, status="in-cell", seconds=0.0, package=None, log=where.log_dir / "-"
                    )
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
            rendered = render_for_part(cell, part, tus, self.matrix, recipe_path)
            result = build_step(title, rendered, report, part=part, tus=tus, **vars(where))
            if result.status == "failed" and part == KERNELS_PART:
                kernel_failed[kernel_key(cell)] = result
            results.append(result)
        return results


def cell_jobs(
    matrix: Matrix, wanted: list[tuple[str, str]], request: BuildRequest, source: SourceOverride | None
) -> CellJobs:
    """The wanted cells' and pip cells' jobs, every part and option checked."""
    wheels, wheel_where = pip_jobs(matrix, wanted, request, source)
    wheel_ids = {(b.cell.id, part) for b, part in wheels}
    cells = {c.id: c for c in [*matrix.cells, *matrix.pip_cells]}  # a pip cell's jobs here are its kernel package's
    conda = [(key, part) for key, part in wanted if (key, part) not in wheel_ids]
    jobs = [(cells[key], part, piece_tus(cells[key], part)) for key, part in conda]
    return CellJobs(matrix=matrix, jobs=jobs, wheels=wheels, wheel_where=wheel_where, source=source)
