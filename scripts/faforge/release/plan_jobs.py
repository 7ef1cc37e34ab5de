"""One job of the plan, as the GitHub Actions matrix include row the workflows read: its slug, name, runner,
timeout, the package it makes and the keys its stage reads.

Every kind of job has its constructor here (a kernel package's whole build, piece or link; a cell's job; a pip
cell's wheel job; an FA3 package's piece or whole build), so that the keys a workflow reads are spelled in one
place, apart from the planning that decides which jobs there are (faforge.release.plan).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from faforge.families.flash_attn_3.matrix import Fa3Package
from faforge.family import FLASH_ATTN_3
from faforge.matrix.cells import Cell
from faforge.matrix.kernels import KernelPackage
from faforge.matrix.pip_builds import PipBuild
from faforge.matrix.render import RenderedCell, RenderedFa3
from faforge.release.cost import CELL_PART, KERNELS_LINK_PART, KERNELS_PART, BuildCost, Part, WheelRunner, cell_part
from faforge.release.pip_plan import WHEEL_PART, wheel_part

if TYPE_CHECKING:
    from faforge.release.build_stage import RenderedBuild

# An FA3 package's own job builds it whole (`faforge build ID`, its default part): alone, or after its pieces.
FA3_PART = "all"
# The one place an FA3 package's jobs and their estimates are decided. Its piece jobs come from the commands
# layer (`pieces`: faforge.families.flash_attn_3.cost, whose timed TU classes go through split_kernels, as a kernel package's
# do; release may not import buildcost: tests/test_layers.py): split_kernels' [kernels] (the package fits one
# job) or its pieces and kernels-link. Either whole job is this package's `all`. Without an estimate the
# package is one `all` job timed at the runner's job limit, an upper bound.
# What the commands layer passes in: each FA3 package's split_kernels jobs by id, given the packages and the cost.
Fa3Estimator = Callable[[list[Fa3Package], BuildCost], Mapping[str, Sequence[Part]]]


def fa3_parts(cost: BuildCost, package: Fa3Package, pieces: Sequence[Part] = ()) -> list[Part]:
    """An FA3 package's jobs: its TU pieces (`faforge build ID --part PIECE`), then its whole build (`all`)."""
    if not pieces:
        return [Part(name=FA3_PART, tus=(), minutes=cost.runner_for(package.platform).job_limit_minutes)]
    return [
        Part(name=FA3_PART, tus=(), minutes=p.minutes) if p.name in (KERNELS_PART, KERNELS_LINK_PART) else p
        for p in pieces
    ]


def package_filename(rendered: RenderedBuild) -> str:
    package = rendered.recipe["package"]
    return f"{package['name']}-{package['version']}-{rendered.build_string}.conda"


def kernel_package_glob(kernels: KernelPackage) -> str:
    """The kernel package's file name up to its hash, which only its own render knows."""
    return f"{kernels.name}-{kernels.version}-{kernels.key.build_string_prefix}*_{kernels.build_number}.conda"


def job_slug(cell_id: str, part: str) -> str:
    """A name safe for artifact and log files: linux-64-py312-torch2.7-cu129-abi1[-cell]."""
    slug = cell_id.replace("/", "-")
    return slug if part == "all" else f"{slug}-{part}"


def _job(cell: Cell, kernels: KernelPackage, part: Part, runner_label: str) -> dict:
    """What every job of a cell (conda or pip) or kernel package carries: its cell, part, runner and kernel package."""
    return {
        "cell": cell.id,
        "part": part.name,
        "platform": cell.platform,
        "runs-on": runner_label,
        "timeout-minutes": part.minutes,
        "python": cell.python,
        "torch": cell.torch,
        "cuda": cell.cuda,
        "cxx11-abi": cell.cxx11_abi,
        "kernels": kernels.key.slug,
        "kernel-package": kernel_package_glob(kernels),
    }


def kernel_job(
    rendered: RenderedCell | PipBuild, kernels: KernelPackage, part: Part, runner_label: str, pieces: int = 0
) -> dict:
    """A job of a kernel package: the whole build, a piece, or the final link. `cell` is the package's
    first cell, whose variant the build renders; `pieces` is how many piece artifacts a kernels-link
    job must find before it builds."""
    return {
        **_job(rendered.cell, kernels, part, runner_label),
        "slug": f"{kernels.key.slug}-{part.name}",
        "name": f"{kernels.key.id} [{part.name}]",
        "build-string": kernels.key.build_string_prefix,
        "package": kernel_package_glob(kernels),
        "pieces": pieces,
    }


def cell_job(
    rendered: RenderedCell, kernels: KernelPackage, runner_label: str, cost: BuildCost, kernel_in_channel: bool
) -> dict:
    """A cell's job: flash_api.cpp and the link, against its kernel package (this run's or the channel's)."""
    return {
        **_job(rendered.cell, kernels, cell_part(cost), runner_label),
        "slug": job_slug(rendered.cell.id, CELL_PART),
        "name": rendered.cell.id,
        "build-string": rendered.build_string,
        "package": package_filename(rendered),
        "pieces": 0,
        "kernel-in-channel": kernel_in_channel,
    }


def wheel_job(
    build: PipBuild, kernels: KernelPackage, *, runner: WheelRunner, cost: BuildCost, kernel_in_channel: bool
) -> dict:
    """One pip cell's job (faforge.release.pip_plan), shaped like a cell job (build-cells.yml reads the same keys) plus
    the wheels it makes and where it makes them: the image and CUDA repository of its platform's machine."""
    return {
        **_job(build.cell, kernels, wheel_part(cost), runner.label),
        "container": runner.container,
        "cuda-repo": runner.cuda_repo,
        "slug": job_slug(build.cell.id, WHEEL_PART),
        "name": build.cell.id,
        "kernel-build": build.kernel_build,
        "build-string": build.build_string,
        "index-name": build.cell.index_name,
        "torch-wheel": build.cell.wheel,
        "package": build.glue_wheel(),  # what it uploads, beside the kernel wheel
        "kernel-wheel": build.kernel_wheel(),
        "pieces": 0,
        "kernel-in-channel": kernel_in_channel,
    }


def fa3_job(rendered: RenderedFa3, runner_label: str, part: Part, pieces: int = 0) -> dict:
    """An FA3 package's job: a piece, or the whole package from recipes/flash-attn-3 then its stable-ABI gate
    against the oldest and the newest torch minor it serves (`torch-range`). `kernels` keys the package's
    compiler cache and its pieces' artifacts, as a kernel package's slug does; `pieces` is how many piece
    artifacts its `all` job must find before it builds."""
    package = rendered.package
    return {
        "cell": package.id,
        "part": part.name,
        "slug": f"{FLASH_ATTN_3.package}-{job_slug(package.id, part.name)}",
        "name": f"{FLASH_ATTN_3.package} {package.id}" + ("" if part.name == FA3_PART else f" [{part.name}]"),
        "platform": package.platform,
        "runs-on": runner_label,
        "timeout-minutes": part.minutes,
        "python": package.python,
        "torch": package.torch,
        "cuda": package.cuda,
        "build-string": rendered.build_string,
        "package": package_filename(rendered),
        "kernels": f"{FLASH_ATTN_3.package}-{job_slug(package.id, FA3_PART)}",
        "pieces": pieces,
        "torch-range": f"{package.served[0]} {package.served[-1]}",
    }
