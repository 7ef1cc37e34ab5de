"""From a few measured TU compiles to the cost of whole cells and of the whole matrix.

Model (each step is checked in tests/buildcost/test_extrapolate.py):
- a TU's CPU time is proportional to its SASS arch count: with --threads 1 nvcc runs cicc and
  ptxas once per arch.  `+PTX` on an arch that also gets SASS adds nothing: it is the same
  compute_XX pass (`nvcc --dryrun` with code=sm_120 and code=compute_120 runs cicc and ptxas
  once each, as with code=sm_120 alone);
- within a class, CPU time is linear in the head dim, fitted through the measured head dims.
  The six head dims 32..256 average 128, so the class mean is the fit at 128; dtype and causal
  variants cost the same as the measured one;
- a class with no measurement costs the mean of the measured classes (the report says "assumed");
- a cell's kernels cost the sum over its 72 TUs; flash_api.cpp (host C++) and the link are left
  out;
- a runner runs MAX_JOBS single-threaded nvcc jobs at once (derive_max_jobs of the build script),
  so its wall time is CPU time / min(MAX_JOBS, cores).

The bench-build section that lays the model out over the matrix is faforge.buildcost.extrapolate_report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from faforge.backend import archs, jobs
from faforge.backend.errors import BuildError
from faforge.costmodel.samples import Sample
from faforge.errors import FaforgeError
from faforge.kernels.tus import CLASSES, HEAD_DIMS, class_counts, default_grid, parse_tu

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class ClassCost:
    tu_class: str
    measured_hdims: tuple[int, ...]  # empty: not measured, assumed to cost the mean of the measured classes
    mean_cpu_s: float  # per arch, averaged over the class's head dims
    worst_cpu_s: float  # per arch, the largest head dim
    peak_rss_gb: float  # largest measured


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (slope, intercept); flat through the mean when there is one distinct x."""
    xs = {x for x, _ in points}
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    if len(xs) < 2:
        return 0.0, mean_y
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return slope, mean_y - slope * mean_x


def class_costs(samples: tuple[Sample, ...], head_dims: tuple[int, ...] = HEAD_DIMS) -> dict[str, ClassCost]:
    by_class = defaultdict(list)
    for s in samples:
        tu = parse_tu(s.tu)
        by_class[tu.tu_class].append((tu.hdim, s.cpu_s / max(1, len(archs.parse_arch_list(s.arch))), s.peak_rss_gb))
    costs = {}
    for tu_class, points in by_class.items():
        slope, intercept = linear_fit([(h, c) for h, c, _ in points])
        at = [max(0.0, slope * h + intercept) for h in head_dims]
        costs[tu_class] = ClassCost(
            tu_class=tu_class,
            measured_hdims=tuple(sorted({h for h, _, _ in points})),
            mean_cpu_s=round(sum(at) / len(at), 1),
            worst_cpu_s=round(at[head_dims.index(max(head_dims))], 1),
            peak_rss_gb=max(r for _, _, r in points),
        )
    measured = list(costs.values())
    for tu_class in CLASSES:
        if tu_class not in costs and measured:
            costs[tu_class] = ClassCost(
                tu_class=tu_class,
                measured_hdims=(),
                mean_cpu_s=round(sum(c.mean_cpu_s for c in measured) / len(measured), 1),
                worst_cpu_s=round(sum(c.worst_cpu_s for c in measured) / len(measured), 1),
                peak_rss_gb=max(c.peak_rss_gb for c in measured),
            )
    return costs


def sass_arch_count(cuda_archs: str) -> int:
    try:
        return len(archs.parse_arch_list(cuda_archs))
    except BuildError as exc:
        raise FaforgeError(f"cuda_archs {cuda_archs!r}: {exc}") from None


@dataclass(frozen=True)
class CellCost:
    cuda_archs: str
    n_archs: int
    tus: int
    cpu_h: float
    worst_tu_cpu_min: float


def cell_cost(costs: dict[str, ClassCost], cuda_archs: str, counts: dict[str, int] | None = None) -> CellCost:
    counts = counts or class_counts(default_grid())
    missing = [c for c in CLASSES if counts.get(c) and c not in costs]
    if missing:
        raise FaforgeError(
            f"no measurement for TU class {', '.join(missing)}",
            hint="measure one TU of it with `faforge bench-build --measure --write`",
        )
    n = sass_arch_count(cuda_archs)
    cpu_s = sum(counts[c] * costs[c].mean_cpu_s * n for c in CLASSES if counts.get(c))
    worst = max(costs[c].worst_cpu_s for c in CLASSES if counts.get(c)) * n
    return CellCost(
        cuda_archs=cuda_archs,
        n_archs=n,
        tus=sum(counts.values()),
        cpu_h=round(cpu_s / 3600, 2),
        worst_tu_cpu_min=round(worst / 60, 1),
    )


@dataclass(frozen=True)
class RunnerFit:
    cpus: int
    mem_gb: float
    n_archs: int
    max_jobs: int
    budget_gb: float  # what the build script's policy reserves for max_jobs jobs
    measured_peak_gb: float  # max_jobs x the largest measured TU peak
    fits: bool


def runner_fit(
    cpus: int,
    mem_gb: float,
    n_archs: int,
    nvcc_threads: int = 1,
    measured_peak_gb: float = 0.0,
    worst_gb: float = jobs.WORST_CASE_GB_PER_JOB,
) -> RunnerFit:
    """MAX_JOBS the build script picks with `mem_gb` available, and whether that many worst-case jobs fit."""
    max_jobs = jobs.derive_max_jobs(mem_gb, cpus, n_archs, nvcc_threads, worst_gb=worst_gb)
    concurrent = max(1, min(nvcc_threads, n_archs))
    per_job = worst_gb * (1 + (concurrent - 1) * jobs.CONCURRENT_ARCH_FACTOR)
    budget = max_jobs * per_job
    return RunnerFit(
        cpus=cpus,
        mem_gb=mem_gb,
        n_archs=n_archs,
        max_jobs=max_jobs,
        budget_gb=round(budget, 1),
        measured_peak_gb=round(max_jobs * measured_peak_gb, 1),
        fits=budget + jobs.RESERVED_GB <= mem_gb,
    )


def wall_hours(cell: CellCost, fit: RunnerFit) -> float:
    return round(cell.cpu_h / min(fit.max_jobs, fit.cpus), 2)
