"""What one FlashAttention-3 package of the matrix costs, per TU class, and the piece jobs it splits into.

The per-class model is faforge.families.flash_attn_3.cost's; the tables, notes and JSON of `faforge bench-build` that
show these costs are faforge.families.flash_attn_3.cost_report's. `faforge plan` needs only the jobs.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields
from pathlib import Path

from faforge.costmodel.runners import BuildCost, Part, Runner, TuClass, parallel_jobs, split_kernels
from faforge.errors import FaforgeError
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.families.flash_attn_3.cost import CLASSES, ClassCost, passes, tu_class
from faforge.families.flash_attn_3.matrix import Fa3Package


@dataclass(frozen=True)
class ClassLine:
    """One class within one package."""

    tu_class: str
    tus: tuple[str, ...]
    passes: int  # summed over its TUs
    cpu_s: float


@dataclass(frozen=True)
class PackageCost:
    id: str
    platform: str
    cuda_archs: str
    platform_factor: float
    lines: tuple[ClassLine, ...]
    jobs: tuple[Part, ...]
    max_jobs: int  # what the build script picks on the platform's runner
    runner: Runner

    @property
    def tus(self) -> int:
        return sum(len(line.tus) for line in self.lines)

    @property
    def cpu_h(self) -> float:
        return round(sum(line.cpu_s for line in self.lines) / 3600, 1)


@dataclass(frozen=True)
class _Fa3JobCost(BuildCost):
    """variants/build-cost.yaml with FA3's TU classes in place of flash-attn 2's, as split_kernels reads it."""

    class_tus: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def tus(self, tu_class: str) -> tuple[str, ...]:
        return self.class_tus[tu_class]


def piece_jobs(cost: BuildCost, platform: str, archs: list[str], lines: tuple[ClassLine, ...]) -> list[Part]:
    """split_kernels over FA3's .cu classes, the glue compiled in the final link job."""
    n = len(archs)
    cu = [line for line in lines if line.tu_class != "glue"]
    glue_min = sum(line.cpu_s for line in lines if line.tu_class == "glue") / 60
    # split_kernels multiplies minutes_per_arch by the list's arch count: give it the per-TU mean over that
    classes = tuple(
        TuClass(name=line.tu_class, minutes_per_arch=line.cpu_s / len(line.tus) / 60 / n, peak_gb=0.0) for line in cu
    )
    base = {f.name: getattr(cost, f.name) for f in fields(BuildCost)}
    job_cost = _Fa3JobCost(
        **{
            **base,
            "classes": classes,
            "link_minutes": cost.link_minutes + cost.safety_factor * glue_min,
            "worst_gb_per_job": fa3_backend.WORST_CASE_GB_PER_JOB,
        },
        class_tus={line.tu_class: line.tus for line in cu},
    )
    # split_kernels reads only the SASS count of the list; '90a' is one SASS arch as '90' is
    return split_kernels(job_cost, platform, ";".join(a.removesuffix("a") for a in archs))


def package_cost(package: Fa3Package, costs: dict[str, ClassCost], factor: float, build_cost: BuildCost) -> PackageCost:
    archs = fa3_backend.parse_archs(package.cuda_archs)
    disabled = fa3_backend.parse_disabled(package.variant()["fa3_disable"])
    by_class = defaultdict(list)
    for tu in fa3_backend.sources(disabled):
        by_class[tu_class(tu)].append(Path(tu).name)
    missing = [c for c in by_class if c not in costs]
    if missing:
        raise FaforgeError(
            f"no FA3 sample for TU class {', '.join(missing)}",
            hint="time one TU of a full build into variants/build-measurements.yaml",
        )
    lines = tuple(
        ClassLine(
            tu_class=c,
            tus=tuple(by_class[c]),
            passes=sum(passes(t, archs) for t in by_class[c]),
            cpu_s=round(factor * sum(costs[c].per_pass_s(t) * passes(t, archs) for t in by_class[c]), 1),
        )
        for c in CLASSES
        if c in by_class
    )
    runner = build_cost.runner_for(package.platform)
    return PackageCost(
        id=package.id,
        platform=package.platform,
        cuda_archs=package.cuda_archs,
        platform_factor=factor,
        lines=lines,
        jobs=tuple(piece_jobs(build_cost, package.platform, archs, lines)),
        max_jobs=parallel_jobs(runner, len(archs), fa3_backend.WORST_CASE_GB_PER_JOB),
        runner=runner,
    )
