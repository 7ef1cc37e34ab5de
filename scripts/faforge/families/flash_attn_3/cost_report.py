"""The FA3 section of `faforge bench-build` (tables, notes, JSON) beside upstream's reported build times: the
timed TUs, faforge.families.flash_attn_3.cost's per-class model over them, and what each package costs
(faforge.families.flash_attn_3.cost_packages)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from faforge.backend.jobs import RESERVED_GB
from faforge.costmodel.extrapolate import runner_fit
from faforge.costmodel.runners import KERNELS_LINK_PART, BuildCost
from faforge.costmodel.samples import Measurements
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.families.flash_attn_3.cost import (
    CLASSES,
    REFERENCE_PLATFORM,
    ClassCost,
    Timed,
    best_timed,
    class_costs,
    platform_ratio,
    timed,
)
from faforge.families.flash_attn_3.cost_packages import PackageCost, package_cost
from faforge.families.flash_attn_3.cost_samples import fa3_measurements
from faforge.families.flash_attn_3.matrix import Fa3Package
from faforge.family import FLASH_ATTN_3

# Upstream's report for a full build (Dao-AILab/flash-attention#1486: MAX_JOBS=8 on a 112-core machine,
# "maybe ~1 hour"; MAX_JOBS=128 there, about 15 minutes), for a sanity check, not a measurement.
UPSTREAM_MAX_JOBS = 8
UPSTREAM_NOTE = (
    "upstream: about 1 h for a full build at MAX_JOBS=8 on a 112-core machine, 15 min at MAX_JOBS=128 there "
    "(flash-attention #1486); more than 3 h elsewhere (#1776)"
)


@dataclass(frozen=True)
class Fa3Report:
    timed: tuple[Timed, ...]
    costs: dict[str, ClassCost]
    feature_ratio: float | None
    feature_ratio_from: tuple[str, ...]
    platform_factors: dict[str, tuple[float | None, int]]  # platform -> (ratio, TU pairs)
    packages: tuple[PackageCost, ...]

    @property
    def tus(self) -> int:
        """TUs of one package (every package of the matrix compiles the same set)."""
        return self.packages[0].tus if self.packages else 0

    key = "fa3"  # its section of `bench-build --json` (faforge.costmodel.section.CostSection)

    @property
    def heading(self) -> str:
        return f"{FLASH_ATTN_3.title}: {self.tus} TUs a package, model in faforge/families/flash_attn_3/cost.py"

    @property
    def matrix_cpu_h(self) -> float:
        return round(sum(p.cpu_h for p in self.packages), 1)

    def peak_rss_gb(self) -> float:
        """The largest peak RSS measured: of a TU timed alone, or of a -j1 build (its largest TU's)."""
        return max(
            [t.sample.peak_rss_gb or 0 for t in self.timed] + [t.build.peak_rss_gb or 0 for t in self.timed],
            default=0.0,
        )

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        out: list[tuple[str, list[str], list[list]]] = [
            (
                "FA3: timed TU compiles (fa3_samples)",
                ["TU", "class", "platform", "archs", "features", "passes", "CPU s", "CPU basis", "wall s", "peak GB"],
                [
                    [
                        t.sample.tu,
                        t.tu_class,
                        t.build.platform,
                        t.build.archs,
                        "full" if t.full else f"trimmed ({len(t.build.disabled_set)} off)",
                        t.passes,
                        t.cpu_s,
                        t.basis,
                        t.sample.wall_s,
                        t.sample.peak_rss_gb if t.sample.peak_rss_gb is not None else "-",
                    ]
                    for t in self.timed
                ],
            )
        ]
        first = self.packages[0] if self.packages else None
        count = {line.tu_class: line for line in first.lines} if first else {}
        out.append(
            (
                "FA3: per TU class, CPU min per TU and GPU arch "
                f"({REFERENCE_PLATFORM}; at head dim 128 where it varies)",
                ["class", "TUs", "samples", "CPU min", "hdims sampled", "from"],
                [
                    [
                        c.tu_class,
                        len(count[c.tu_class].tus) if c.tu_class in count else 0,
                        c.samples,
                        round(c.at_hdim128_s / 60, 2),
                        ",".join(map(str, c.hdims)) or "-",
                        c.status,
                    ]
                    for c in (self.costs[k] for k in CLASSES if k in self.costs)
                ],
            )
        )
        peak = self.peak_rss_gb()
        rows = []
        for p in self.packages:
            fit = runner_fit(
                p.runner.cpus,
                p.runner.memory_gb,
                len(fa3_backend.parse_archs(p.cuda_archs)),
                1,
                peak,
                worst_gb=fa3_backend.WORST_CASE_GB_PER_JOB,
            )
            fits = fit.measured_peak_gb + RESERVED_GB <= p.runner.memory_gb
            rows.append(
                [
                    p.id,
                    p.tus,
                    sum(line.passes for line in p.lines),
                    f"{p.platform_factor:.2f}",
                    p.cpu_h,
                    p.max_jobs,
                    f"{fit.measured_peak_gb} of {p.runner.memory_gb:g}" + ("" if fits else " NO"),
                    round(p.cpu_h / min(p.max_jobs, p.runner.cpus), 1),
                    len(p.jobs),
                ]
            )
        rows.append(
            [
                f"matrix ({len(self.packages)} packages)",
                sum(p.tus for p in self.packages),
                sum(sum(line.passes for line in p.lines) for p in self.packages),
                "",
                self.matrix_cpu_h,
                "",
                "",
                "",
                sum(len(p.jobs) for p in self.packages),
            ]
        )
        out.append(
            (
                "FA3: packages (faforge matrix --fa3), nothing disabled; "
                "MAX_JOBS as the build script picks it on the platform's runner",
                [
                    "package",
                    "TUs",
                    "passes",
                    "platform x",
                    "CPU h",
                    "MAX_JOBS",
                    "x peak GB, of runner GB",
                    "one-job wall h",
                    "CI jobs",
                ],
                rows,
            )
        )
        out.append(
            (
                "FA3: piece jobs per package (faforge.costmodel.runners.split_kernels, variants/build-cost.yaml "
                "runners)",
                ["packages", "runner", "job", "TUs", "minutes"],
                self._job_rows(),
            )
        )
        return out

    def markdown_rows(self) -> list[str]:
        """The rows of variants/README.md's FA3 table: per package, then the whole FA3 matrix."""
        rows = [f"| {p.id} | {p.tus} | {p.cpu_h} | {len(p.jobs)} |" for p in self.packages]
        return [
            *rows,
            f"| FA3 matrix ({len(self.packages)} packages) | "
            f"{sum(p.tus for p in self.packages)} | {self.matrix_cpu_h} | "
            f"{sum(len(p.jobs) for p in self.packages)} |",
        ]

    def _job_rows(self) -> list[list]:
        layouts = defaultdict(list)
        for p in self.packages:
            layouts[(p.runner, p.jobs)].append(p.id)
        rows = []
        for (runner, jobs), ids in layouts.items():
            label = f"{runner.label} ({runner.cpus} CPUs, {runner.memory_gb:g} GB, {runner.job_limit_minutes} min)"
            for i, job in enumerate(jobs):
                rows.append(
                    [
                        ", ".join(ids) if i == 0 else "",
                        label if i == 0 else "",
                        job.name,
                        len(job.tus) if job.tus else ("glue + link" if job.name == KERNELS_LINK_PART else "all"),
                        job.minutes,
                    ]
                )
        return rows

    def notes(self) -> list[str]:
        out = []
        if self.feature_ratio:
            out.append(
                f"full/trimmed CPU ratio, measured on {', '.join(self.feature_ratio_from)}: {self.feature_ratio:.2f}"
            )
        else:
            out.append("full/trimmed CPU ratio: not measured yet (no kernel timed in both a full and a trimmed build)")
        for platform, (ratio, pairs) in self.platform_factors.items():
            out.append(
                f"{platform} / {REFERENCE_PLATFORM} CPU: "
                + (
                    f"{ratio:.2f} over {pairs} kernel TUs timed for both"
                    if ratio
                    else "no kernel TU timed for both: 1.00 assumed"
                )
            )
        peaks = [(t, t.sample.peak_rss_gb) for t in self.timed if t.sample.peak_rss_gb is not None]
        if peaks:
            top, top_gb = max(peaks, key=lambda peak: peak[1])
            budget = fa3_backend.WORST_CASE_GB_PER_JOB
            over = top_gb > budget
            out.append(
                f"largest peak RSS of a TU timed alone: {top_gb} "
                f"GB ({top.sample.tu}, {top.build.build}); the FA3 "
                f"build budgets {budget:.2f} GB a job"
                + (", less than that TU: with several jobs a runner may run out of memory" if over else "")
            )
        measured = [c.tu_class for c in self.costs.values() if c.measured]
        estimated = [c.tu_class for c in self.costs.values() if not c.measured]
        out.append(f"measured classes: {', '.join(measured) or 'none'}; estimated: {', '.join(estimated) or 'none'}")
        per = max((p.cpu_h for p in self.packages), default=0.0)
        out.append(
            f"sanity: {UPSTREAM_NOTE}; ours: {per} CPU h per package = "
            f"{per / UPSTREAM_MAX_JOBS:.1f} h at {UPSTREAM_MAX_JOBS} parallel "
            f"single-threaded nvcc jobs on cores like this machine's"
        )
        return out

    def as_json(self) -> dict:
        return {
            "tus": self.tus,
            "classes": {
                c.tu_class: {
                    "status": c.status,
                    "measured": c.measured,
                    "samples": c.samples,
                    "hdims": list(c.hdims),
                    "cpu_s_per_pass_hdim128": round(c.at_hdim128_s, 1),
                    "peak_rss_gb": c.peak_rss_gb,
                }
                for c in self.costs.values()
            },
            "feature_ratio": round(self.feature_ratio, 3) if self.feature_ratio else None,
            "platform_factors": {p: round(r, 3) if r else None for p, (r, _) in self.platform_factors.items()},
            "packages": [
                {
                    "id": p.id,
                    "platform": p.platform,
                    "cuda_archs": p.cuda_archs,
                    "tus": p.tus,
                    "cpu_h": p.cpu_h,
                    "max_jobs": p.max_jobs,
                    "classes": {
                        line.tu_class: {"tus": len(line.tus), "passes": line.passes, "cpu_s": line.cpu_s}
                        for line in p.lines
                    },
                    "jobs": [{"name": j.name, "tus": len(j.tus), "minutes": j.minutes} for j in p.jobs],
                }
                for p in self.packages
            ],
            "matrix_cpu_h": self.matrix_cpu_h,
            "upstream": UPSTREAM_NOTE,
        }


def report(measurements: Measurements, packages: list[Fa3Package], build_cost: BuildCost) -> Fa3Report:
    """The FA3 section of `faforge bench-build`: `packages` are faforge matrix --fa3's (load_matrix().fa3)."""
    measured = fa3_measurements(measurements)
    samples = tuple(timed(s, measured.build(s.build)) for s in measured.samples)
    used = best_timed(samples)
    costs, ratio, ratio_from = class_costs([t for t in used if t.build.platform == REFERENCE_PLATFORM])
    factors = {p: platform_ratio(used, p) for p in sorted({pkg.platform for pkg in packages} - {REFERENCE_PLATFORM})}
    costed = tuple(
        package_cost(pkg, costs, (factors.get(pkg.platform) or (None, 0))[0] or 1.0, build_cost) for pkg in packages
    )
    return Fa3Report(
        timed=samples,
        costs=costs,
        feature_ratio=ratio,
        feature_ratio_from=ratio_from,
        platform_factors=factors,
        packages=costed,
    )
