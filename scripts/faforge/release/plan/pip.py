"""The pip world in `faforge plan`: one wheel job per pip cell, after the kernel stage, reusing the
kernel packages the conda cells have (faforge.matrix.pip_builds); what the target wheel index already holds;
and the runner hours each torch release adds.

A wheel job (`faforge build PIP_CELL --part wheel`) compiles flash_api.cpp against the cell's PyPI torch and
links it against the kernel package of its key, which it takes from this run's kernel job or from the
channel, exactly as a conda cell's job does; then it repacks that package's library as the kernel wheel
(only its RUNPATH changes) and the backend's wheel as the glue wheel (faforge.pipwheel). No kernel TU is
compiled for pip. A kernel key only pip cells have (CUDA 12.8 and 13.2 today: PyPI's torch 2.8-2.10 and
2.15 builds) is an ordinary kernel package, built by the kernel stage like any other.

A pip cell counts as in the index when the index named for it (BASE/torch2.11-cu130/) lists both its glue
wheel and its kernel wheel, under the names the matrix gives them (the platform tag left open: it is
decided from the binary at build time).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from faforge.costmodel.runners import BuildCost, Part, cell_part, split_kernels
from faforge.family import FLASH_ATTN
from faforge.matrix.kernels import KernelKey, KernelPackage, kernel_key
from faforge.matrix.pip_builds import PipBuild
from faforge.versions import vtuple

PIP_STAGE = "wheels"
# A pip cell's own job: its glue wheel and its kernel wheel. `all` builds its kernel package first when none is found.
WHEEL_PART = "wheel"
GLUE_PROJECT = FLASH_ATTN.package
KERNEL_PROJECT = FLASH_ATTN.kernel_package


def no_wheel_runner(platform: str) -> str:
    """Why a pip cell of `platform` gets no wheel job (`faforge plan`'s pip_not_built)."""
    return f"no wheel runner for {platform} in variants/build-cost.yaml (wheel_runners: label, container, cuda_repo)"


def wheel_part(cost: BuildCost) -> Part:
    """A wheel job costs what a conda cell's job does: setup, flash_api.cpp, the link (variants/build-cost.yaml);
    repacking the two wheels takes seconds (faforge.pipwheel)."""
    return Part(name=WHEEL_PART, tus=cell_part(cost).tus, minutes=cell_part(cost).minutes)


# ---------------------------------------------------------------- what the target index holds


def _read_one(where: str, index_name: str) -> dict[str, set[str]] | None:
    """project -> the file names one index lists, read as pip reads it; None when that index does not exist yet."""
    from faforge.pipindex.read import read_published  # noqa: PLC0415 (only with --index)

    listing = read_published(where, index_name)
    if listing is None:
        return None
    return {project: {f.filename for f in files} for project, files in listing.files().items()}


@dataclass(frozen=True)
class IndexHoldings:
    where: str
    files: dict[str, dict[str, set[str]]]  # index name -> project -> file names
    missing: tuple[str, ...]  # indexes that do not exist yet

    def holds(self, build: PipBuild) -> bool:
        """Both wheels of the cell, under the names the matrix gives them, in the cell's own index."""
        listed = self.files.get(build.cell.index_name, {})
        return any(fnmatch.fnmatchcase(f, build.glue_wheel()) for f in listed.get(GLUE_PROJECT, ())) and any(
            fnmatch.fnmatchcase(f, build.kernel_wheel()) for f in listed.get(KERNEL_PROJECT, ())
        )


def index_holdings(where: str, index_names: Iterable[str]) -> IndexHoldings:
    """What each named index below the root `where` (a folder or a URL) lists, read as pip reads it."""
    files, missing = {}, []
    for name in sorted(set(index_names)):
        found = _read_one(where, name)
        if found is None:
            missing.append(name)
        else:
            files[name] = found
    return IndexHoldings(where=where, files=files, missing=tuple(missing))


# ---------------------------------------------------------------- runner hours per torch release


@dataclass(frozen=True)
class TorchReleaseCost:
    """What one torch minor of a pip world adds to CI: a wheel job per pip cell, and the kernel packages its
    cells need that no conda cell and no older torch minor of the world needs."""

    world: str
    torch_minor: str
    cells: int
    wheel_job_minutes: int
    new_kernels: tuple[str, ...]  # kernel key ids
    kernel_jobs: int
    kernel_minutes: int

    @property
    def wheel_minutes(self) -> int:
        return self.cells * self.wheel_job_minutes

    @property
    def runner_minutes(self) -> int:
        return self.wheel_minutes + self.kernel_minutes

    def as_json(self) -> dict:
        return {
            "world": self.world,
            "torch_minor": self.torch_minor,
            "pip_cells": self.cells,
            "wheel_jobs": self.cells,
            "wheel_job_minutes": self.wheel_job_minutes,
            "wheel_runner_minutes": self.wheel_minutes,
            "new_kernel_packages": list(self.new_kernels),
            "kernel_jobs": self.kernel_jobs,
            "kernel_runner_minutes": self.kernel_minutes,
            "runner_minutes": self.runner_minutes,
            "runner_hours": round(self.runner_minutes / 60, 1),
        }


def kernel_jobs_of(cost: BuildCost, key: KernelKey) -> list[Part]:
    """The jobs one kernel package takes on its runner (whole, or pieces and the link)."""
    return split_kernels(cost, key.platform, key.cuda_archs)


def added_per_torch_release(
    builds: list[PipBuild], conda_kernels: list[KernelPackage], cost: BuildCost
) -> list[TorchReleaseCost]:
    """Each torch minor of each pip world, oldest first, with what it adds (see TorchReleaseCost). A kernel key
    counts as new for the oldest minor that needs it, unless a conda world's cells need it too (then the
    conda world builds it anyway and the pip cells reuse it)."""
    had = {k.key for k in conda_kernels}
    out = []
    minutes = wheel_part(cost).minutes
    for world in sorted({b.cell.world for b in builds}):
        for minor in sorted({b.cell.torch_minor for b in builds if b.cell.world == world}, key=vtuple):
            mine = [b for b in builds if (b.cell.world, b.cell.torch_minor) == (world, minor)]
            new = sorted({kernel_key(b.cell) for b in mine} - had)
            had |= set(new)
            jobs = [p for key in new for p in kernel_jobs_of(cost, key)]
            out.append(
                TorchReleaseCost(
                    world=world,
                    torch_minor=minor,
                    cells=len(mine),
                    wheel_job_minutes=minutes,
                    new_kernels=tuple(k.id for k in new),
                    kernel_jobs=len(jobs),
                    kernel_minutes=sum(p.minutes for p in jobs),
                )
            )
    return out
