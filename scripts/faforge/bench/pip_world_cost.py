"""What a torch release costs the pip world, for `faforge bench-build`: per torch minor of each pip
world, the runner hours CI adds (faforge.release.plan.pip: one wheel job per pip cell, plus the jobs of the
kernel packages its cells need that no conda cell and no older minor needs, at variants/build-cost.yaml's
estimates, setup and safety factor included) and the CPU hours of compiling, from the measured data
(variants/build-measurements.yaml): flash_api.cpp's measured CPU time per pip cell, and each new kernel
package at the measured per-TU CPU time x its SASS archs (faforge.costmodel.extrapolate). The kernel TUs are
never compiled for a wheel: a kernel key a conda world has is its package, repacked.
"""

from __future__ import annotations

from dataclasses import dataclass

from faforge.costmodel.extrapolate import ClassCost, cell_cost
from faforge.costmodel.runners import BuildCost
from faforge.costmodel.samples import Measurements
from faforge.errors import FaforgeError
from faforge.matrix.kernels import KernelPackage
from faforge.matrix.pip_builds import PipBuild
from faforge.release.plan.pip import TorchReleaseCost, added_per_torch_release, wheel_part


@dataclass(frozen=True)
class ReleaseRow:
    runner: TorchReleaseCost
    kernel_cpu_h: float
    glue_cpu_h: float

    @property
    def cpu_h(self) -> float:
        return round(self.kernel_cpu_h + self.glue_cpu_h, 2)

    def as_json(self) -> dict:
        return {
            **self.runner.as_json(),
            "kernel_cpu_h": self.kernel_cpu_h,
            "glue_cpu_h": self.glue_cpu_h,
            "cpu_h": self.cpu_h,
        }


@dataclass(frozen=True)
class PipWorldReport:
    rows: tuple[ReleaseRow, ...]
    glue_cpu_min: float  # measured: one flash_api.cpp compile and link
    glue_source: str
    wheel_job_minutes: int
    cells: int
    kernel_wheels: int  # one per kernel key the pip cells have (each a kernel package's library, repacked)

    @property
    def newest(self) -> ReleaseRow:
        return self.rows[-1]

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        rows = [
            [
                r.runner.torch_minor,
                r.runner.world,
                r.runner.cells,
                len(r.runner.new_kernels),
                r.runner.kernel_jobs,
                f"{r.runner.runner_minutes / 60:.1f}",
                f"{r.glue_cpu_h:.2f}",
                f"{r.kernel_cpu_h:.1f}",
                f"{r.cpu_h:.1f}",
            ]
            for r in self.rows
        ]
        return [
            (
                "pip world: added runner hours per torch release",
                [
                    "torch",
                    "world",
                    "wheel jobs",
                    "new kernel packages",
                    "kernel jobs",
                    "runner h",
                    "glue CPU h",
                    "kernel CPU h",
                    "CPU h",
                ],
                rows,
            )
        ]

    def notes(self) -> list[str]:
        n = self.newest
        return [
            "runner h: each job's estimate from variants/build-cost.yaml "
            f"(a wheel job {self.wheel_job_minutes} min, as a conda cell's "
            "job; a new kernel package's jobs as `faforge plan` splits "
            "them). CPU h: measured (variants/build-measurements.yaml): "
            f"flash_api.cpp {self.glue_cpu_min:.1f} CPU min per wheel job, a kernel package its TUs x SASS archs.",
            f"The newest, torch {n.runner.torch_minor}: {n.runner.cells} "
            f"wheel jobs and {len(n.runner.new_kernels)} new kernel packages "
            f"({', '.join(n.runner.new_kernels) or 'none'}) = "
            f"{n.runner.runner_minutes / 60:.1f} runner hours, {n.cpu_h:.1f} CPU hours. "
            "A torch minor on a CUDA and Philox layout the matrix already has adds its wheel jobs only.",
            f"{self.cells} pip cells, {self.cells} glue wheels, "
            f"{self.kernel_wheels} kernel wheels (no kernel TU compiled for pip).",
        ]

    def as_json(self) -> dict:
        return {
            "glue_cpu_min": self.glue_cpu_min,
            "wheel_job_minutes": self.wheel_job_minutes,
            "pip_cells": self.cells,
            "kernel_wheels": self.kernel_wheels,
            "per_torch_release": [r.as_json() for r in self.rows],
        }


def report(
    measurements: Measurements,
    costs: dict[str, ClassCost],
    builds: list[PipBuild],
    conda_kernels: list[KernelPackage],
    cost: BuildCost,
) -> PipWorldReport:
    """The table for `builds` (faforge.matrix.pip_builds), given the conda worlds' kernel packages."""
    if not measurements.glue:
        raise FaforgeError(
            "variants/build-measurements.yaml has no `glue` entry (a measured flash_api.cpp compile)",
            hint="time one glue build and add it (variants/README.md, Build cost)",
        )
    glue_cpu_min = round(sum(g.cpu_s for g in measurements.glue) / len(measurements.glue) / 60, 2)
    archs: dict[str, str] = {}  # kernel key id -> its arch list
    for b in builds:
        archs.setdefault(b.kernel.key.id, b.kernel.key.cuda_archs)
    rows = tuple(
        ReleaseRow(
            runner=r,
            kernel_cpu_h=round(sum(cell_cost(costs, archs[k]).cpu_h for k in r.new_kernels), 2),
            glue_cpu_h=round(r.cells * glue_cpu_min / 60, 2),
        )
        for r in added_per_torch_release(builds, conda_kernels, cost)
    )
    return PipWorldReport(
        rows=rows,
        glue_cpu_min=glue_cpu_min,
        glue_source=measurements.glue[0].source,
        wheel_job_minutes=wheel_part(cost).minutes,
        cells=len(builds),
        kernel_wheels=len({b.kernel.key for b in builds}),
    )
