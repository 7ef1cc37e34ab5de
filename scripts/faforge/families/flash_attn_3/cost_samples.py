"""FlashAttention-3's own sections of variants/build-measurements.yaml: `fa3_builds` and `fa3_samples`, timed
compiles of its TUs (upstream's hopper/ folder), hand-entered from /usr/bin/time and ninja logs.

A build says what it compiled (target platform, GPU archs, the features it disabled, nvcc, torch headers) and,
when /usr/bin/time wrapped it, its CPU time; a sample is one TU of a build, with its own CPU time where it was
timed alone, or only the wall time its build's ninja log gives. The file's reader (faforge.costmodel.samples)
keeps these lists as read; this module checks them against the family's backend (faforge.families.flash_attn_3.cost
extrapolates them to whole packages).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faforge.backend.errors import BuildError
from faforge.costmodel.samples import Measurements, entry
from faforge.errors import DataError
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.family import FLASH_ATTN_3
from faforge.matrix.releases import PLATFORMS

BUILDS, SAMPLES = FLASH_ATTN_3.measurement_sections


@dataclass(frozen=True)
class Fa3Build:
    """One timed FA3 build: what it compiled, and /usr/bin/time's totals for the whole of it if taken."""

    build: str  # its name, which its samples cite
    platform: str  # the target platform; linux-aarch64 is cross-compiled on x86_64, as CI builds it
    archs: str  # its GPU arch list, '90a' or '80;90a' (each TU compiles the ones fa3_backend.gencode gives it)
    disabled: (
        str  # the FLASH_ATTENTION_DISABLE_* features it built without, comma-separated; '' for a package's full build
    )
    nvcc: str
    torch: str  # whose headers the glue compiled against
    cpu_s: float | None  # user+system time of the whole build; None when only its TUs were timed
    wall_s: float | None  # its elapsed time, from the same /usr/bin/time
    peak_rss_gb: float | None
    source: str

    @property
    def disabled_set(self) -> frozenset[str]:
        return fa3_backend.parse_disabled(self.disabled)


@dataclass(frozen=True)
class Fa3Sample:
    """One TU of an FA3 build: its CPU time if it was timed alone, else only its wall time in the build."""

    tu: str  # the file name, without instantiations/
    build: str  # the Fa3Build it was compiled in
    cpu_s: float | None  # user+system time of this TU alone; None when the build's ninja log is all that timed it
    wall_s: float
    peak_rss_gb: float | None
    source: str


@dataclass(frozen=True)
class Fa3Measurements:
    builds: tuple[Fa3Build, ...]
    samples: tuple[Fa3Sample, ...]

    def build(self, name: str) -> Fa3Build:
        return next(b for b in self.builds if b.build == name)


def fa3_measurements(measurements: Measurements) -> Fa3Measurements:
    """The family's sections of `measurements`, each entry checked; empty where the file has none."""
    path = measurements.path
    raw_builds = measurements.sections.get(BUILDS, [])
    builds = tuple(_build(path, f"{BUILDS}[{i}]", b) for i, b in enumerate(raw_builds))
    by_name = {b.build: b for b in builds}
    if len(by_name) != len(builds):
        raise DataError(path, BUILDS, "two builds share a name", hint="give each build its own `build:` name")
    raw_samples = measurements.sections.get(SAMPLES, [])
    samples = tuple(_sample(path, f"{SAMPLES}[{i}]", s, by_name) for i, s in enumerate(raw_samples))
    return Fa3Measurements(builds=builds, samples=samples)


def _build(path: Path, key: str, raw: object) -> Fa3Build:
    build = entry(path, key, raw, Fa3Build)
    if build.platform not in PLATFORMS:
        raise DataError(
            path, f"{key}.platform", f"invalid value {build.platform!r}", hint=f"one of {', '.join(PLATFORMS)}"
        )
    for name, check in (("archs", fa3_backend.parse_archs), ("disabled", fa3_backend.parse_disabled)):
        try:
            check(getattr(build, name))
        except BuildError as exc:
            raise DataError(path, f"{key}.{name}", str(exc)) from None
    return build


def _sample(path: Path, key: str, raw: object, builds: dict[str, Fa3Build]) -> Fa3Sample:
    sample = entry(path, key, raw, Fa3Sample)
    build = builds.get(sample.build)
    if build is None:
        raise DataError(
            path,
            f"{key}.build",
            f"no {BUILDS} entry named {sample.build!r}",
            hint=f"one of {', '.join(builds) or '(none yet)'}",
        )
    names = {Path(tu).name for tu in fa3_backend.sources(build.disabled_set)}
    if sample.tu not in names:
        raise DataError(
            path,
            f"{key}.tu",
            f"{sample.tu!r} is not a TU of a build without {build.disabled or 'no feature'}",
            hint="a file name as the build compiles it, e.g. flash_fwd_hdim128_bf16_sm90.cu",
        )
    return sample
