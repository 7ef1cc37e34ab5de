"""flash-attn 2's section of `faforge bench-build`: the measured TU compiles, the model's per-class and per-cell
costs over the matrix, the MAX_JOBS each runner gets, ccache's cross-python reuse, as tables and JSON.

The model itself (per class, per cell, per runner) is faforge.costmodel.extrapolate's, which the split and the
pip world's report use too; this module only lays it out over the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from faforge.costmodel.extrapolate import CellCost, ClassCost, RunnerFit, cell_cost, class_costs, runner_fit, wall_hours
from faforge.costmodel.samples import Measurements
from faforge.kernels.cachekey import kernel_cache_key
from faforge.kernels.tus import CLASSES
from faforge.matrix import load_matrix

if TYPE_CHECKING:
    from faforge.matrix.cells import Cell


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
