"""What FlashAttention-3's packages cost to compile, from the timed TUs in variants/build-measurements.yaml.

Model (each rule is checked in tests/buildcost/test_fa3.py):
- a package compiles fa3_backend.sources() with no feature disabled (293 TUs at the pinned commit) and
  each TU once per GPU arch fa3_backend.gencode gives it: *_sm90.cu sm_90a, *_sm80.cu sm_80, the
  combine and scheduler TUs every arch of the list, the C++ glue none (it counts as one pass). A TU's
  CPU time is proportional to its pass count, as for flash-attn 2 (faforge.costmodel.extrapolate);
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
- piece jobs are faforge.costmodel.runners.split_kernels on variants/build-cost.yaml's runners, setup,
  link and safety factor, with these classes (each at its mean per-TU cost): a class's TUs in equal
  runs until each fits the job limit, then a final link job, which also compiles the glue (the
  build script's --only-tus takes .cu TUs only); the link itself is not measured for FA3. MAX_JOBS
  is the build script's: derive_max_jobs at FA3's own worst TU (fa3_backend.WORST_CASE_GB_PER_JOB).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from faforge.costmodel.extrapolate import linear_fit
from faforge.errors import FaforgeError
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.families.flash_attn_3.cost_samples import Fa3Build, Fa3Sample

KERNEL_CLASSES = ("sm90_fwd", "sm90_bwd", "sm80_fwd", "sm80_bwd")
CLASSES = (*KERNEL_CLASSES, "combine", "scheduler", "glue")
# Classes whose sources no feature switch thins out: a trimmed build's sample measures them as they are.
TRIM_FREE = ("scheduler", "glue")
REFERENCE_PLATFORM = "linux-64"
FULL_BUILD: frozenset[str] = frozenset()  # what a package disables (Fa3Package.variant()'s fa3_disable is empty)
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
        raise FaforgeError(
            f"{name}: not a TU this cost model knows", hint="add its class to faforge.families.flash_attn_3.cost"
        )
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
    return ClassCost(
        tu_class=tu_class,
        status=status,
        slope=slope,
        intercept=intercept,
        hdims=tuple(sorted({h for h, _ in dims if h})),
        samples=len(points),
        peak_rss_gb=max(peaks, default=None),
    )


def feature_ratio(reference: list[Timed]) -> tuple[float | None, tuple[str, ...]]:
    """Full/trimmed CPU per pass over kernels timed both ways; (None, ()) without such a pair."""
    trimmed = defaultdict(list)
    for t in reference:
        if not t.full and t.tu_class in KERNEL_CLASSES:
            trimmed[t.key()].append(t.per_pass_s)
    ratios = [
        (t.tu_class, t.per_pass_s / (sum(trimmed[t.key()]) / len(trimmed[t.key()])))
        for t in reference
        if t.full and trimmed.get(t.key())
    ]
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
            costs[name] = _fit(
                name, f"scaled x {ratio:.2f}, the full/trimmed ratio of {', '.join(ratio_from)}", trimmed, ratio
            )
        elif trimmed:
            costs[name] = _fit(name, "lower bound: trimmed build, no full/trimmed ratio measured", trimmed)
    known = [costs[c] for c in KERNEL_CLASSES if c in costs]
    for name in CLASSES:
        if name not in costs and known:
            mean = sum(c.at_hdim128_s for c in known) / len(known)
            costs[name] = ClassCost(
                tu_class=name,
                status=f"assumed: mean of {', '.join(c.tu_class for c in known)}",
                slope=0.0,
                intercept=mean,
                hdims=(),
                samples=0,
                peak_rss_gb=None,
            )
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
