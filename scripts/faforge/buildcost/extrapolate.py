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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from faforge.backend import archs, jobs
from faforge.backend.errors import BuildError
from faforge.buildcost.samples import Measurements, Sample
from faforge.errors import FaforgeError
from faforge.kernels.cachekey import kernel_cache_key
from faforge.kernels.tus import CLASSES, HEAD_DIMS, class_counts, default_grid, parse_tu
from faforge.matrix import load_matrix

if TYPE_CHECKING:
    from faforge.matrix.cells import Cell


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


@dataclass(frozen=True)
class Report:
    measurements: Measurements
    costs: dict[str, ClassCost]
    cells: list[tuple[CellCost, int]]  # (cost of one cell, how many matrix cells use this arch list)
    kernel_groups: dict[str, int]  # arch list -> distinct (platform, torch build, CUDA, ABI) groups
    runners: list[tuple[int, float]]

    def fits(self) -> list[RunnerFit]:
        peak = max((c.peak_rss_gb for c in self.costs.values()), default=0.0)
        return [runner_fit(cpus, gb, cell.n_archs, 1, peak) for cpus, gb in self.runners for cell, _ in self.cells]

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        out = [
            (
                "Measured TU compiles (one arch each)",
                ["TU", "arch", "CPU s", "wall s", "peak RSS GB", "torch", "source"],
                [
                    [s.tu, s.arch, s.cpu_s, s.wall_s, s.peak_rss_gb, s.torch, s.source]
                    for s in self.measurements.samples
                ],
            )
        ]
        out.append(
            (
                "Per TU class, per SASS arch (linear in head dim)",
                ["class", "hdims measured", "mean CPU min", "worst TU CPU min", "peak RSS GB"],
                [
                    [
                        c.tu_class,
                        ",".join(map(str, c.measured_hdims)) or "assumed",
                        round(c.mean_cpu_s / 60, 2),
                        round(c.worst_cpu_s / 60, 2),
                        c.peak_rss_gb,
                    ]
                    for c in (self.costs[k] for k in CLASSES if k in self.costs)
                ],
            )
        )
        rows = []
        for cell, used_by in self.cells:
            walls = [f"{wall_hours(cell, runner_fit(cpus, gb, cell.n_archs))} h" for cpus, gb in self.runners]
            cold = round(cell.cpu_h * used_by, 1)
            shared = round(cell.cpu_h * self.kernel_groups.get(cell.cuda_archs, 0), 1)
            rows.append(
                [
                    cell.cuda_archs,
                    cell.n_archs,
                    cell.tus,
                    cell.cpu_h,
                    cell.worst_tu_cpu_min,
                    *walls,
                    used_by,
                    cold,
                    shared,
                ]
            )
        out.append(
            (
                "Kernels of one cell, per arch list in variants/matrix.yaml",
                [
                    "archs",
                    "SASS",
                    "TUs",
                    "CPU h",
                    "worst TU CPU min",
                    *(f"wall {c}c/{g:g}GB" for c, g in self.runners),
                    "matrix cells",
                    "CPU h all cells",
                    "CPU h, one per cache key",
                ],
                rows,
            )
        )
        out.append(
            (
                "MAX_JOBS the build script picks (NVCC_THREADS=1); memory = what it sees as available",
                ["cores", "GB", "SASS archs", "MAX_JOBS", "policy budget GB", "measured peak GB", "fits"],
                [
                    [
                        f.cpus,
                        f.mem_gb,
                        f.n_archs,
                        f.max_jobs,
                        f.budget_gb,
                        f.measured_peak_gb,
                        "yes" if f.fits else "NO",
                    ]
                    for f in self.fits()
                ],
            )
        )
        out.append(
            (
                "Cross-python reuse through ccache (second python vs cold first, same TUs, one run)",
                [
                    "TUs",
                    "arch",
                    "variants",
                    "cold wall s",
                    "cold CPU s",
                    "2nd wall s",
                    "2nd CPU s",
                    "wall ratio",
                    "CPU ratio",
                    "hit rate",
                    "cache",
                ],
                [
                    [
                        len(r.tus),
                        r.arch,
                        f"{r.first} -> {r.second}",
                        r.cold_wall_s,
                        r.cold_cpu_s,
                        r.second_wall_s,
                        r.second_cpu_s,
                        f"{r.wall_ratio:.3f}",
                        f"{r.cpu_ratio:.3f}",
                        f"{r.hit_rate:.0%}",
                        r.cache,
                    ]
                    for r in self.measurements.reuse
                ],
            )
        )
        out.append(
            (
                "For variants/build-cost.yaml `classes:` (faforge plan)",
                ["class", "line"],
                [
                    [
                        c.tu_class,
                        f"{c.tu_class}: {{minutes_per_arch: {c.mean_cpu_s / 60:.1f}, peak_gb: {c.peak_rss_gb}}}",
                    ]
                    for c in (self.costs[k] for k in CLASSES if k in self.costs)
                ],
            )
        )
        return out

    def as_json(self) -> dict:
        return {
            "classes": {
                c.tu_class: {
                    "measured_hdims": list(c.measured_hdims),
                    "mean_cpu_s": c.mean_cpu_s,
                    "worst_cpu_s": c.worst_cpu_s,
                    "peak_rss_gb": c.peak_rss_gb,
                }
                for c in self.costs.values()
            },
            "cells": [
                {
                    "cuda_archs": c.cuda_archs,
                    "sass_archs": c.n_archs,
                    "tus": c.tus,
                    "cpu_h": c.cpu_h,
                    "worst_tu_cpu_min": c.worst_tu_cpu_min,
                    "matrix_cells": n,
                    "cache_keys": self.kernel_groups.get(c.cuda_archs, 0),
                }
                for c, n in self.cells
            ],
            "max_jobs": [
                {
                    "cpus": f.cpus,
                    "mem_gb": f.mem_gb,
                    "sass_archs": f.n_archs,
                    "max_jobs": f.max_jobs,
                    "budget_gb": f.budget_gb,
                    "fits": f.fits,
                }
                for f in self.fits()
            ],
            "reuse": [
                {
                    "tus": r.tus,
                    "arch": r.arch,
                    "first": r.first,
                    "second": r.second,
                    "wall_ratio": round(r.wall_ratio, 4),
                    "cpu_ratio": round(r.cpu_ratio, 4),
                    "hit_rate": round(r.hit_rate, 4),
                }
                for r in self.measurements.reuse
            ],
        }


def report(
    measurements: Measurements, runners: list[tuple[int, float]], matrix_cells: list[Cell] | None = None
) -> Report:
    costs = class_costs(measurements.samples)
    if matrix_cells is None:
        matrix = load_matrix()
        cells_list, archs_lists = matrix.cells, [rule.value for rule in matrix.policy.cuda_archs]
    else:
        cells_list, archs_lists = matrix_cells, sorted({c.cuda_archs for c in matrix_cells})
    used = {a: sum(1 for c in cells_list if c.cuda_archs == a) for a in archs_lists}
    groups = {a: len({kernel_cache_key(c) for c in cells_list if c.cuda_archs == a}) for a in archs_lists}
    cells = [(cell_cost(costs, a), used[a]) for a in archs_lists] if costs else []
    return Report(measurements=measurements, costs=costs, cells=cells, kernel_groups=groups, runners=runners)
