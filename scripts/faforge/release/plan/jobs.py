"""One job of the plan, as the GitHub Actions matrix include row the workflows read: its slug, name, runner,
timeout, the package it makes and the keys its stage reads.

The jobs of the kernel packages, cells and pip cells have their constructors here (a kernel package's whole
build, piece or link; a cell's job; a pip cell's wheel job), apart from the planning that decides which jobs
there are (faforge.families.<name>.plan); another family's jobs are its plan module's, with the keys its own
workflow reads.
"""

from __future__ import annotations

from typing import Protocol

from faforge.costmodel.runners import CELL_PART, BuildCost, Part, WheelRunner, cell_part
from faforge.matrix.cells import Cell
from faforge.matrix.kernels import KernelPackage
from faforge.matrix.pip_builds import PipBuild
from faforge.matrix.render import RenderedCell
from faforge.release.plan.pip import WHEEL_PART, wheel_part


class Rendered(Protocol):
    """A package as its recipe renders it: the file it makes is named from these."""

    @property
    def build_string(self) -> str: ...

    @property
    def recipe(self) -> dict: ...


def package_filename(rendered: Rendered) -> str:
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
    """One pip cell's job (faforge.release.plan.pip), shaped like a cell job (build-cells.yml reads the same keys) plus
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
