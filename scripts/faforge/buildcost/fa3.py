"""What FlashAttention-3's packages cost to compile, from the timed TUs in variants/build-measurements.yaml.

Model (each rule is checked in tests/buildcost/test_fa3.py):
- a package compiles fa3_backend.sources() with no feature disabled (293 TUs at the pinned commit) and
  each TU once per GPU arch fa3_backend.gencode gives it: *_sm90.cu sm_90a, *_sm80.cu sm_80, the
  combine and scheduler TUs every arch of the list, the C++ glue none (it counts as one pass). A TU's
  CPU time is proportional to its pass count, as for flash-attn 2 (faforge.buildcost.extrapolate);
- TUs fall into seven classes: sm90_fwd, sm90_bwd, sm80_fwd, sm80_bwd (the kernels), combine,
  scheduler and glue. A class's CPU time per TU and pass comes, best first, from:
  measured: samples of a full build (nothing disabled) for the reference platform, linux-64;
  measured, trimmed build: scheduler and glue samples of a trimmed build, whose sources test no
  feature switch that changes what they compile (the glue's FLASHATTENTION_DISABLE_* blocks drop host
  dispatch code only; not the combine TU, whose ARCH_SWITCH instantiates Arch 90 alone without SM8x);
  scaled: kernel samples of a trimmed build times the full/trimmed ratio measured on TUs timed both
  ways (same class, head dim and dtype). A trimmed TU compiles fewer kernels: the disabled switches
  (LOCAL, VARLEN, APPENDKV, CLUSTER, SOFTCAP) collapse the launch templates' static switches;
  lower bound: trimmed kernel samples with no such ratio measured yet, unscaled;
  assumed: no sample: the mean of the kernel classes that have one;
- within a class, CPU time is linear in the head dim (the larger of QK and V) when samples cover two
  or more head dims (extrapolate.linear_fit), else the same for every head dim; dtype and the
  split/paged/softcap/packgqa variants of a class cost what the sampled TU costs;
- a sample's CPU time is its own user+system time when it was timed alone; when only its build's
  ninja log timed it (wall time at -j1), its wall time times its build's CPU/elapsed ratio from
  /usr/bin/time, which spreads what other processes took of the machine evenly over the build's TUs;
  with neither, its wall time (an upper bound);
- a linux-aarch64 package (cross-compiled on x86_64, as CI builds it) costs the linux-64 estimate
  times the aarch64/x86_64 CPU ratio of kernel TUs timed for both platforms (the glue is left out of
  the ratio: its builds used different torch headers), or 1.0 with no such pair. The device passes
  are the same work for both targets, so the ratio stays near 1; CPU time also rises somewhat when
  compiles share the cores, which the samples did unevenly;
- a sample timed alone replaces the ninja-log estimate of the same compile (TU, platform, archs,
  features): a build's CPU/elapsed ratio spreads a loaded machine's losses evenly, and they were not;
- piece jobs are faforge.release.cost.split_kernels on variants/build-cost.yaml's runners, setup,
  link and safety factor, with these classes (each at its mean per-TU cost): a class's TUs in equal
  runs until each fits the job limit, then a final link job, which also compiles the glue (the
  build script's --only-tus takes .cu TUs only); the link itself is not measured for FA3. MAX_JOBS
  is the build script's derive_max_jobs on the runner, whose per-job memory budget comes from
  flash-attn 2's TUs; the report sets FA3's measured peak beside it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field, fields
from pathlib import Path

from faforge import fa3_backend
from faforge.backend.jobs import RESERVED_GB, WORST_CASE_GB_PER_JOB
from faforge.buildcost.extrapolate import linear_fit, runner_fit
from faforge.buildcost.samples import Fa3Build, Fa3Sample, Measurements
from faforge.errors import FaforgeError
from faforge.matrix.flash_attn_3 import Fa3Package
from faforge.release.cost import KERNELS_LINK_PART, BuildCost, Part, Runner, TuClass, parallel_jobs, split_kernels

KERNEL_CLASSES = ("sm90_fwd", "sm90_bwd", "sm80_fwd", "sm80_bwd")
CLASSES = (*KERNEL_CLASSES, "combine", "scheduler", "glue")
# Classes whose sources no feature switch thins out: a trimmed build's sample measures them as they are.
TRIM_FREE = ("scheduler", "glue")
REFERENCE_PLATFORM = "linux-64"
FULL_BUILD = frozenset()  # what a package disables (Fa3Package.variant()'s fa3_disable is empty)
# Upstream's report for a full build (flash-attention issue #1486: MAX_JOBS=8 on a 112-core machine,
# "maybe ~1 hour"; MAX_JOBS=128 there, about 15 minutes), for a sanity check, not a measurement.
UPSTREAM_MAX_JOBS = 8
UPSTREAM_NOTE = ("upstream: about 1 h for a full build at MAX_JOBS=8 on a 112-core machine, 15 min at MAX_JOBS=128 there "
                 "(flash-attention #1486); more than 3 h elsewhere (#1776)")
_KERNEL = re.compile(r"flash_(fwd|bwd)_hdim(\d+)(?:_(\d+))?_([a-z0-9]+?)(?:_[a-z]+)*_sm(80|90)\.cu")


def tu_class(tu: str) -> str:
    name = Path(tu).name
    if name == fa3_backend.STABLE_GLUE:
        return "glue"
    if name == "flash_fwd_combine.cu":
        return "combine"
    if name == "flash_prepare_scheduler.cu":
        return "scheduler"
    match = _KERNEL.fullmatch(name)
    if not match:
        raise FaforgeError(f"{name}: not a TU this cost model knows", hint="add its class to faforge.buildcost.fa3")
    return f"sm{match[5]}_{match[1]}"


def head_dim(tu: str) -> int | None:
    """The larger of a kernel TU's QK and V head dims (flash_fwd_hdim64_512_... -> 512); None for the others."""
    match = _KERNEL.fullmatch(Path(tu).name)
    return max(int(match[2]), int(match[3] or 0)) if match else None


def dtype(tu: str) -> str | None:
    match = _KERNEL.fullmatch(Path(tu).name)
    return match[4] if match else None


def passes(tu: str, archs: list[str]) -> int:
    """nvcc passes (one per GPU arch) of a TU in a build for `archs`; the C++ glue counts as one."""
    return len(fa3_backend.gencode(tu, archs)) // 2 if tu.endswith(".cu") else 1


@dataclass(frozen=True)
class Timed:
    """One sample with the CPU time the model uses for it."""

    sample: Fa3Sample
    build: Fa3Build
    cpu_s: float
    basis: str

    @property
    def tu_class(self) -> str:
        return tu_class(self.sample.tu)

    @property
    def passes(self) -> int:
        return passes(self.sample.tu, fa3_backend.parse_archs(self.build.archs))

    @property
    def per_pass_s(self) -> float:
        return self.cpu_s / self.passes

    @property
    def full(self) -> bool:
        return self.build.disabled_set == FULL_BUILD

    def key(self) -> tuple:
        """What a full and a trimmed sample share when they time the same kernel (the full build's
        TU may be the *_softcapall_* one that includes it)."""
        return self.tu_class, head_dim(self.sample.tu), dtype(self.sample.tu)

    def config(self) -> tuple:
        """What makes two samples time the same compile: the TU, the target, the archs and the features."""
        return self.sample.tu, self.build.platform, self.build.archs, self.build.disabled_set


TIMED_ALONE = "CPU, timed alone"


def timed(sample: Fa3Sample, build: Fa3Build) -> Timed:
    if sample.cpu_s is not None:
        return Timed(sample, build, sample.cpu_s, TIMED_ALONE)
    if build.cpu_s and build.wall_s:
        share = build.cpu_s / build.wall_s
        return Timed(sample, build, round(sample.wall_s * share, 1), f"wall x {share:.2f} (build CPU/elapsed)")
    return Timed(sample, build, sample.wall_s, "wall (no CPU time: upper bound)")


def best_timed(samples: tuple[Timed, ...]) -> list[Timed]:
    """The samples the model uses: of a compile timed both alone and in a build's ninja log, only the
    timings taken alone."""
    alone = {t.config() for t in samples if t.basis == TIMED_ALONE}
    return [t for t in samples if t.basis == TIMED_ALONE or t.config() not in alone]


@dataclass(frozen=True)
class ClassCost:
    tu_class: str
    status: str  # measured | measured, trimmed build | scaled | lower bound | assumed
    slope: float  # CPU s per pass per head dim
    intercept: float  # CPU s per pass at head dim 0 (the flat cost when not linear)
    hdims: tuple[int, ...]  # head dims sampled
    samples: int
    peak_rss_gb: float | None

    def per_pass_s(self, tu: str) -> float:
        hdim = head_dim(tu)
        return max(0.0, self.intercept + self.slope * (hdim or 0))

    @property
    def measured(self) -> bool:
        return self.status.startswith("measured")

    @property
    def at_hdim128_s(self) -> float:
        """CPU s per pass of a head-dim-128 TU (the sampled one; any TU of a class without head dims)."""
        return max(0.0, self.intercept + self.slope * 128)


def _fit(tu_class: str, status: str, points: list[Timed], factor: float = 1.0) -> ClassCost:
    dims = [(head_dim(t.sample.tu) or 0, t.per_pass_s * factor) for t in points]
    slope, intercept = linear_fit(dims)
    peaks = [t.sample.peak_rss_gb for t in points if t.sample.peak_rss_gb is not None]
    return ClassCost(tu_class=tu_class, status=status, slope=slope, intercept=intercept,
                     hdims=tuple(sorted({h for h, _ in dims if h})), samples=len(points), peak_rss_gb=max(peaks, default=None))


def feature_ratio(reference: list[Timed]) -> tuple[float | None, tuple[str, ...]]:
    """Full/trimmed CPU per pass over kernels timed both ways; (None, ()) without such a pair."""
    trimmed = defaultdict(list)
    for t in reference:
        if not t.full and t.tu_class in KERNEL_CLASSES:
            trimmed[t.key()].append(t.per_pass_s)
    ratios = [(t.tu_class, t.per_pass_s / (sum(trimmed[t.key()]) / len(trimmed[t.key()])))
              for t in reference if t.full and trimmed.get(t.key())]
    if not ratios:
        return None, ()
    return sum(r for _, r in ratios) / len(ratios), tuple(sorted({c for c, _ in ratios}))


def class_costs(reference: list[Timed]) -> tuple[dict[str, ClassCost], float | None, tuple[str, ...]]:
    ratio, ratio_from = feature_ratio(reference)
    by_class = defaultdict(list)
    for t in reference:
        by_class[t.tu_class].append(t)
    costs = {}
    for name in CLASSES:
        full = [t for t in by_class[name] if t.full]
        trimmed = [t for t in by_class[name] if not t.full]
        if full:
            costs[name] = _fit(name, "measured", full)
        elif trimmed and name in TRIM_FREE:
            costs[name] = _fit(name, "measured, trimmed build", trimmed)
        elif trimmed and name in KERNEL_CLASSES and ratio:
            costs[name] = _fit(name, f"scaled x {ratio:.2f}, the full/trimmed ratio of {', '.join(ratio_from)}", trimmed, ratio)
        elif trimmed:
            costs[name] = _fit(name, "lower bound: trimmed build, no full/trimmed ratio measured", trimmed)
    known = [costs[c] for c in KERNEL_CLASSES if c in costs]
    for name in CLASSES:
        if name not in costs and known:
            mean = sum(c.at_hdim128_s for c in known) / len(known)
            costs[name] = ClassCost(tu_class=name, status=f"assumed: mean of {', '.join(c.tu_class for c in known)}", slope=0.0,
                                    intercept=mean, hdims=(), samples=0, peak_rss_gb=None)
    return {name: costs[name] for name in CLASSES if name in costs}, ratio, ratio_from


def platform_ratio(samples: list[Timed], platform: str) -> tuple[float | None, int]:
    """CPU of `platform` over the reference platform's, over kernel TUs timed for both with the same
    features and archs; (None, 0) without such a pair."""
    def keyed(p):
        cpu = defaultdict(list)
        for t in samples:
            if t.build.platform == p and t.tu_class in KERNEL_CLASSES:
                cpu[(t.sample.tu, t.build.disabled_set, t.build.archs)].append(t.cpu_s)
        return {k: sum(v) / len(v) for k, v in cpu.items()}
    mine, reference = keyed(platform), keyed(REFERENCE_PLATFORM)
    both = [k for k in mine if k in reference]
    if not both:
        return None, 0
    return sum(mine[k] for k in both) / sum(reference[k] for k in both), len(both)


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
    classes = tuple(TuClass(name=line.tu_class, minutes_per_arch=line.cpu_s / len(line.tus) / 60 / n, peak_gb=0.0) for line in cu)
    base = {f.name: getattr(cost, f.name) for f in fields(BuildCost)}
    job_cost = _Fa3JobCost(**{**base, "classes": classes, "link_minutes": cost.link_minutes + cost.safety_factor * glue_min},
                           class_tus={line.tu_class: line.tus for line in cu})
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
        raise FaforgeError(f"no FA3 sample for TU class {', '.join(missing)}", hint="time one TU of a full build into variants/build-measurements.yaml")
    lines = tuple(ClassLine(tu_class=c, tus=tuple(by_class[c]), passes=sum(passes(t, archs) for t in by_class[c]),
                            cpu_s=round(factor * sum(costs[c].per_pass_s(t) * passes(t, archs) for t in by_class[c]), 1))
                  for c in CLASSES if c in by_class)
    runner = build_cost.runner_for(package.platform)
    return PackageCost(id=package.id, platform=package.platform, cuda_archs=package.cuda_archs, platform_factor=factor, lines=lines,
                       jobs=tuple(piece_jobs(build_cost, package.platform, archs, lines)), max_jobs=parallel_jobs(runner, len(archs)),
                       runner=runner)


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

    @property
    def matrix_cpu_h(self) -> float:
        return round(sum(p.cpu_h for p in self.packages), 1)

    def peak_rss_gb(self) -> float:
        """The largest peak RSS measured: of a TU timed alone, or of a -j1 build (its largest TU's)."""
        return max([t.sample.peak_rss_gb or 0 for t in self.timed] + [t.build.peak_rss_gb or 0 for t in self.timed], default=0.0)

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        out = [("FA3: timed TU compiles (fa3_samples)", ["TU", "class", "platform", "archs", "features", "passes", "CPU s", "CPU basis", "wall s", "peak GB"],
                [[t.sample.tu, t.tu_class, t.build.platform, t.build.archs, "full" if t.full else f"trimmed ({len(t.build.disabled_set)} off)",
                  t.passes, t.cpu_s, t.basis, t.sample.wall_s, t.sample.peak_rss_gb if t.sample.peak_rss_gb is not None else "-"] for t in self.timed])]
        first = self.packages[0] if self.packages else None
        count = {line.tu_class: line for line in first.lines} if first else {}
        out.append((f"FA3: per TU class, CPU min per TU and GPU arch ({REFERENCE_PLATFORM}; at head dim 128 where it varies)",
                    ["class", "TUs", "samples", "CPU min", "hdims sampled", "from"],
                    [[c.tu_class, len(count[c.tu_class].tus) if c.tu_class in count else 0, c.samples, round(c.at_hdim128_s / 60, 2),
                      ",".join(map(str, c.hdims)) or "-", c.status] for c in (self.costs[k] for k in CLASSES if k in self.costs)]))
        peak = self.peak_rss_gb()
        rows = []
        for p in self.packages:
            fit = runner_fit(p.runner.cpus, p.runner.memory_gb, len(fa3_backend.parse_archs(p.cuda_archs)), 1, peak)
            fits = fit.measured_peak_gb + RESERVED_GB <= p.runner.memory_gb
            rows.append([p.id, p.tus, sum(line.passes for line in p.lines), f"{p.platform_factor:.2f}", p.cpu_h, p.max_jobs,
                         f"{fit.measured_peak_gb} of {p.runner.memory_gb:g}" + ("" if fits else " NO"),
                         round(p.cpu_h / min(p.max_jobs, p.runner.cpus), 1), len(p.jobs)])
        rows.append([f"matrix ({len(self.packages)} packages)", sum(p.tus for p in self.packages),
                     sum(sum(line.passes for line in p.lines) for p in self.packages), "", self.matrix_cpu_h, "", "", "",
                     sum(len(p.jobs) for p in self.packages)])
        out.append(("FA3: packages (faforge matrix --fa3), nothing disabled; MAX_JOBS as the build script picks it on the platform's runner",
                    ["package", "TUs", "passes", "platform x", "CPU h", "MAX_JOBS", "x peak GB, of runner GB", "one-job wall h", "CI jobs"], rows))
        out.append(("FA3: piece jobs per package (faforge.release.cost.split_kernels, variants/build-cost.yaml runners)",
                    ["packages", "runner", "job", "TUs", "minutes"], self._job_rows()))
        return out

    def markdown_rows(self) -> list[str]:
        """The rows of variants/README.md's FA3 table: per package, then the whole FA3 matrix."""
        rows = [f"| {p.id} | {p.tus} | {p.cpu_h} | {len(p.jobs)} |" for p in self.packages]
        return [*rows, f"| FA3 matrix ({len(self.packages)} packages) | {sum(p.tus for p in self.packages)} | {self.matrix_cpu_h} | "
                       f"{sum(len(p.jobs) for p in self.packages)} |"]

    def _job_rows(self) -> list[list]:
        layouts = defaultdict(list)
        for p in self.packages:
            layouts[(p.runner, p.jobs)].append(p.id)
        rows = []
        for (runner, jobs), ids in layouts.items():
            label = f"{runner.label} ({runner.cpus} CPUs, {runner.memory_gb:g} GB, {runner.job_limit_minutes} min)"
            for i, job in enumerate(jobs):
                rows.append([", ".join(ids) if i == 0 else "", label if i == 0 else "", job.name,
                             len(job.tus) if job.tus else ("glue + link" if job.name == KERNELS_LINK_PART else "all"), job.minutes])
        return rows

    def notes(self) -> list[str]:
        out = []
        if self.feature_ratio:
            out.append(f"full/trimmed CPU ratio, measured on {', '.join(self.feature_ratio_from)}: {self.feature_ratio:.2f}")
        else:
            out.append("full/trimmed CPU ratio: not measured yet (no kernel timed in both a full and a trimmed build)")
        for platform, (ratio, pairs) in self.platform_factors.items():
            out.append(f"{platform} / {REFERENCE_PLATFORM} CPU: " + (f"{ratio:.2f} over {pairs} kernel TUs timed for both" if ratio
                                                                      else "no kernel TU timed for both: 1.00 assumed"))
        peaks = [t for t in self.timed if t.sample.peak_rss_gb is not None]
        if peaks:
            top = max(peaks, key=lambda t: t.sample.peak_rss_gb)
            over = top.sample.peak_rss_gb > WORST_CASE_GB_PER_JOB
            out.append(f"largest peak RSS of a TU timed alone: {top.sample.peak_rss_gb} GB ({top.sample.tu}, {top.build.build}); the MAX_JOBS "
                       f"policy budgets {WORST_CASE_GB_PER_JOB:.2f} GB a job" + (", less than that TU: with several jobs a runner may run out "
                                                                                  "of memory" if over else ""))
        measured = [c.tu_class for c in self.costs.values() if c.measured]
        estimated = [c.tu_class for c in self.costs.values() if not c.measured]
        out.append(f"measured classes: {', '.join(measured) or 'none'}; estimated: {', '.join(estimated) or 'none'}")
        per = max((p.cpu_h for p in self.packages), default=0.0)
        out.append(f"sanity: {UPSTREAM_NOTE}; ours: {per} CPU h per package = {per / UPSTREAM_MAX_JOBS:.1f} h at {UPSTREAM_MAX_JOBS} parallel "
                   f"single-threaded nvcc jobs on cores like this machine's")
        return out

    def as_json(self) -> dict:
        return {
            "tus": self.tus,
            "classes": {c.tu_class: {"status": c.status, "measured": c.measured, "samples": c.samples, "hdims": list(c.hdims),
                                     "cpu_s_per_pass_hdim128": round(c.at_hdim128_s, 1), "peak_rss_gb": c.peak_rss_gb}
                        for c in self.costs.values()},
            "feature_ratio": round(self.feature_ratio, 3) if self.feature_ratio else None,
            "platform_factors": {p: round(r, 3) if r else None for p, (r, _) in self.platform_factors.items()},
            "packages": [{"id": p.id, "platform": p.platform, "cuda_archs": p.cuda_archs, "tus": p.tus, "cpu_h": p.cpu_h,
                          "max_jobs": p.max_jobs, "classes": {line.tu_class: {"tus": len(line.tus), "passes": line.passes, "cpu_s": line.cpu_s}
                                                              for line in p.lines},
                          "jobs": [{"name": j.name, "tus": len(j.tus), "minutes": j.minutes} for j in p.jobs]} for p in self.packages],
            "matrix_cpu_h": self.matrix_cpu_h,
            "upstream": UPSTREAM_NOTE,
        }


def report(measurements: Measurements, packages: list[Fa3Package], build_cost: BuildCost) -> Fa3Report:
    """The FA3 section of `faforge bench-build`: `packages` are faforge matrix --fa3's (load_matrix().fa3)."""
    builds = {b.build: b for b in measurements.fa3_builds}
    samples = tuple(timed(s, builds[s.build]) for s in measurements.fa3_samples)
    used = best_timed(samples)
    costs, ratio, ratio_from = class_costs([t for t in used if t.build.platform == REFERENCE_PLATFORM])
    factors = {p: platform_ratio(used, p) for p in sorted({pkg.platform for pkg in packages} - {REFERENCE_PLATFORM})}
    costed = tuple(package_cost(pkg, costs, (factors.get(pkg.platform) or (None, 0))[0] or 1.0, build_cost) for pkg in packages)
    return Fa3Report(timed=samples, costs=costs, feature_ratio=ratio, feature_ratio_from=ratio_from, platform_factors=factors, packages=costed)
