"""variants/build-measurements.yaml: measured compile costs and binary sizes, kept as data.

Each sample is one nvcc call on one kernel TU for one arch; each reuse entry is one run of the
cross-python compiler-cache benchmark.  `faforge bench-build --measure --write` appends to the
file; `faforge bench-build` (and `faforge plan`, through extrapolate.py) read it.  `glue` entries
are compiles of flash_api.cpp, the one TU a cell's own job compiles once the kernels are a separate
package; `sizes` entries are bytes of a real build's binaries, from which `faforge bench-build`
models package sizes per arch count (faforge.bench.kernel_split).  Both are hand-entered, each with
its source.  `fa3_builds` and `fa3_samples` are timed compiles of FlashAttention-3's TUs (upstream's
hopper/ folder): a build says what it compiled (target platform, GPU archs, the features it disabled,
nvcc, torch headers) and, when /usr/bin/time wrapped it, its CPU time; a sample is one TU of a build,
with its own CPU time where it was timed alone, or only the wall time its build's ninja log gives.
faforge.families.flash_attn_3.cost extrapolates them to whole packages. Hand-entered too, each with its source.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import yaml

from faforge import paths
from faforge.backend.errors import BuildError
from faforge.datafile import load_yaml
from faforge.errors import DataError, FaforgeError
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.kernels.tus import parse_tu
from faforge.matrix.releases import PLATFORMS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")  # a dataclass of this file's entries

FILE_NAME = "build-measurements.yaml"
KEYS = ("schema", "samples", "reuse", "glue", "sizes", "fa3_builds", "fa3_samples")
HEADER = f"""\
# Measured compile cost of {FLASH_ATTN.package} kernel TUs (one nvcc call, one TU, one arch) and of the
# cross-python compiler cache. Written by `faforge bench-build --measure --write`; read by
# `faforge bench-build`, which extrapolates per-cell totals from it (see variants/README.md,
# "Build cost"). cpu_s is user+system time of nvcc and its children: it does not depend on what
# else the machine runs, wall_s does. Each entry says where and when it was measured.
# fa3_builds and fa3_samples: timed compiles of {FLASH_ATTN_3.package} TUs, hand-entered from /usr/bin/time
# and ninja logs; faforge/buildcost/fa3.py extrapolates the FA3 packages from them.
"""


@dataclass(frozen=True)
class Sample:
    tu: str
    arch: str
    nvcc: str
    torch: str
    cxx_std: str
    cpu_s: float
    wall_s: float
    peak_rss_gb: float
    source: str


@dataclass(frozen=True)
class ReuseRun:
    tus: list[str]
    arch: str
    first: str  # the cold variant, e.g. "py3.11"
    second: str
    cold_wall_s: float
    cold_cpu_s: float
    second_wall_s: float
    second_cpu_s: float
    hits: int
    misses: int
    cache: str  # "ccache 4.14.2"
    source: str

    @property
    def wall_ratio(self) -> float:
        return self.second_wall_s / self.cold_wall_s

    @property
    def cpu_ratio(self) -> float:
        return self.second_cpu_s / self.cold_cpu_s

    @property
    def hit_rate(self) -> float:
        return self.hits / max(1, self.hits + self.misses)


@dataclass(frozen=True)
class GlueBuild:
    """One compile of csrc/flash_attn/flash_api.cpp (host C++ against one torch's headers)."""

    torch: str
    cxx_std: str
    cpu_s: float
    wall_s: float
    peak_rss_gb: float
    source: str


SIZE_PARTS = ("kernel-library", "fatbin", "glue")


@dataclass(frozen=True)
class SizeSample:
    """Bytes of one binary of a real split build, as its package ships it (stripped): `kernel-library`
    libflash_attn_kernels.so, `fatbin` its .nv_fatbin section (the GPU code), `glue` the flash_attn_2_cuda
    module linked against it; raw and zstd-compressed."""

    part: str
    sass_archs: int  # SASS archs of the build it comes from
    bytes: int
    zstd_bytes: int
    zstd_level: int
    source: str


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
class Measurements:
    path: Path
    samples: tuple[Sample, ...]
    reuse: tuple[ReuseRun, ...]
    glue: tuple[GlueBuild, ...] = ()
    sizes: tuple[SizeSample, ...] = ()
    fa3_builds: tuple[Fa3Build, ...] = ()
    fa3_samples: tuple[Fa3Sample, ...] = ()

    def fa3_build(self, name: str) -> Fa3Build:
        return next(b for b in self.fa3_builds if b.build == name)


def default_path() -> Path:
    return paths.variants_dir() / FILE_NAME


def _entry(path: Path, key: str, raw: object, cls: type[D]) -> D:
    names = [f.name for f in fields(cls)]
    if not isinstance(raw, dict) or set(raw) != set(names):
        raise DataError(path, key, f"invalid entry {raw!r}", hint=f"keys: {', '.join(names)}")
    for f in fields(cls):
        value = raw[f.name]
        if value is None and f.type.endswith("| None"):
            continue
        numeric = f.type.removesuffix(" | None") in ("float", "int")
        if numeric and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise DataError(path, f"{key}.{f.name}", f"invalid value {value!r}", hint="a non-negative number")
        if f.type == "str" and not (isinstance(value, str) and (value or f.name == "disabled")):
            raise DataError(path, f"{key}.{f.name}", f"invalid value {value!r}", hint="a non-empty string")
    return cls(**raw)


def load(path: Path | None = None) -> Measurements:
    path = path or default_path()
    raw = load_yaml(path, hint="measure with `faforge bench-build --measure --write`")
    if (
        not isinstance(raw, dict)
        or raw.get("schema") != 1
        or not {"schema", "samples", "reuse"} <= set(raw) <= set(KEYS)
    ):
        raise DataError(
            path,
            "schema",
            "expected keys schema: 1, samples, reuse (and optionally glue, sizes, fa3_builds, fa3_samples)",
        )
    for key in ("samples", "reuse"):
        if not isinstance(raw[key], (list, type(None))):
            raise DataError(path, key, f"invalid value {raw[key]!r}", hint="a list of measurements")
    samples = tuple(_entry(path, f"samples[{i}]", s, Sample) for i, s in enumerate(raw["samples"] or []))
    for i, sample in enumerate(samples):
        try:
            parse_tu(sample.tu)
        except FaforgeError as exc:
            raise DataError(path, f"samples[{i}].tu", str(exc)) from None
    reuse = tuple(_entry(path, f"reuse[{i}]", r, ReuseRun) for i, r in enumerate(raw["reuse"] or []))
    glue = tuple(_entry(path, f"glue[{i}]", g, GlueBuild) for i, g in enumerate(raw.get("glue") or []))
    sizes = tuple(_entry(path, f"sizes[{i}]", z, SizeSample) for i, z in enumerate(raw.get("sizes") or []))
    for i, size in enumerate(sizes):
        if size.part not in SIZE_PARTS:
            raise DataError(
                path, f"sizes[{i}].part", f"invalid value {size.part!r}", hint=f"one of {', '.join(SIZE_PARTS)}"
            )
    fa3_builds = tuple(_fa3_build(path, f"fa3_builds[{i}]", b) for i, b in enumerate(_list(path, raw, "fa3_builds")))
    by_name = {b.build: b for b in fa3_builds}
    if len(by_name) != len(fa3_builds):
        raise DataError(path, "fa3_builds", "two builds share a name", hint="give each build its own `build:` name")
    fa3_samples = tuple(
        _fa3_sample(path, f"fa3_samples[{i}]", s, by_name) for i, s in enumerate(_list(path, raw, "fa3_samples"))
    )
    return Measurements(
        path=path, samples=samples, reuse=reuse, glue=glue, sizes=sizes, fa3_builds=fa3_builds, fa3_samples=fa3_samples
    )


def _list(path: Path, raw: dict, key: str) -> list:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise DataError(path, key, f"invalid value {value!r}", hint="a list of measurements")
    return value


def _fa3_build(path: Path, key: str, raw: object) -> Fa3Build:
    build = _entry(path, key, raw, Fa3Build)
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


def _fa3_sample(path: Path, key: str, raw: object, builds: dict[str, Fa3Build]) -> Fa3Sample:
    sample = _entry(path, key, raw, Fa3Sample)
    build = builds.get(sample.build)
    if build is None:
        raise DataError(
            path,
            f"{key}.build",
            f"no fa3_builds entry named {sample.build!r}",
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


def dump(measurements: Measurements) -> str:
    body = {
        "schema": 1,
        "samples": [asdict(s) for s in measurements.samples],
        "reuse": [asdict(r) for r in measurements.reuse],
    }
    if measurements.glue:
        body["glue"] = [asdict(g) for g in measurements.glue]
    if measurements.sizes:
        body["sizes"] = [asdict(z) for z in measurements.sizes]
    if measurements.fa3_builds:
        body["fa3_builds"] = [asdict(b) for b in measurements.fa3_builds]
    if measurements.fa3_samples:
        body["fa3_samples"] = [asdict(s) for s in measurements.fa3_samples]
    return HEADER + yaml.safe_dump(body, sort_keys=False, width=120)


def append(path: Path, samples: list[Sample], reuse: list[ReuseRun]) -> Measurements:
    current = load(path) if path.exists() else Measurements(path=path, samples=(), reuse=())
    updated = replace(current, path=path, samples=current.samples + tuple(samples), reuse=current.reuse + tuple(reuse))
    path.write_text(dump(updated))
    return updated
