"""variants/build-measurements.yaml: measured compile costs and binary sizes, kept as data.

Each sample is one nvcc call on one kernel TU for one arch; each reuse entry is one run of the
cross-python compiler-cache benchmark.  `faforge bench-build --measure --write` appends to the
file; `faforge bench-build` (and `faforge plan`, through extrapolate.py) read it.  `glue` entries
are compiles of flash_api.cpp, the one TU a cell's own job compiles once the kernels are a separate
package; `sizes` entries are bytes of a real build's binaries, from which `faforge bench-build`
models package sizes per arch count (faforge.bench.kernel_split).  Both are hand-entered, each with
its source.  Any other top-level list is a family's own timed compiles, kept here as read (`sections`):
the family that owns it reads and checks its entries (faforge.families.<name>), so this file's model
stays the same whichever families it holds.  The comment block at the top of the file is kept as read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import yaml

from faforge import paths
from faforge.datafile import load_yaml
from faforge.errors import DataError, FaforgeError
from faforge.family import FLASH_ATTN, families
from faforge.kernels.tus import parse_tu

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")  # a dataclass of this file's entries

FILE_NAME = "build-measurements.yaml"
KEYS = ("schema", "samples", "reuse", "glue", "sizes")
HEADER = f"""\
# Measured compile cost of {FLASH_ATTN.package} kernel TUs (one nvcc call, one TU, one arch) and of the
# cross-python compiler cache. Written by `faforge bench-build --measure --write`; read by
# `faforge bench-build`, which extrapolates per-cell totals from it (see variants/README.md,
# "Build cost"). cpu_s is user+system time of nvcc and its children: it does not depend on what
# else the machine runs, wall_s does. Each entry says where and when it was measured.
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
class Measurements:
    path: Path
    samples: tuple[Sample, ...]
    reuse: tuple[ReuseRun, ...]
    glue: tuple[GlueBuild, ...] = ()
    sizes: tuple[SizeSample, ...] = ()
    sections: dict[str, list] = field(default_factory=dict)  # a family's own lists, as read, in the file's order
    header: str = HEADER  # the comment block the file starts with


def default_path() -> Path:
    return paths.variants_dir() / FILE_NAME


def entry(path: Path, key: str, raw: object, cls: type[D]) -> D:
    """One entry of `cls` at `key`, checked (a family reads its own sections with it)."""
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
    known = {*KEYS, *(key for family in families() for key in family.measurement_sections)}
    if not isinstance(raw, dict) or raw.get("schema") != 1 or not {"schema", "samples", "reuse"} <= set(raw) <= known:
        raise DataError(
            path,
            "schema",
            "expected keys schema: 1, samples, reuse (and optionally "
            f"{', '.join(sorted(known - {'schema', 'samples', 'reuse'}))})",
        )
    # The comment block at its top, kept as read: read as load_yaml read it (capped, a regular UTF-8 file).
    text = paths.read_user_file(path, kind="data")
    for key in ("samples", "reuse"):
        if not isinstance(raw[key], (list, type(None))):
            raise DataError(path, key, f"invalid value {raw[key]!r}", hint="a list of measurements")
    samples = tuple(entry(path, f"samples[{i}]", s, Sample) for i, s in enumerate(raw["samples"] or []))
    for i, sample in enumerate(samples):
        try:
            parse_tu(sample.tu)
        except FaforgeError as exc:
            raise DataError(path, f"samples[{i}].tu", str(exc)) from None
    reuse = tuple(entry(path, f"reuse[{i}]", r, ReuseRun) for i, r in enumerate(raw["reuse"] or []))
    glue = tuple(entry(path, f"glue[{i}]", g, GlueBuild) for i, g in enumerate(_list(path, raw, "glue")))
    sizes = tuple(entry(path, f"sizes[{i}]", z, SizeSample) for i, z in enumerate(_list(path, raw, "sizes")))
    for i, size in enumerate(sizes):
        if size.part not in SIZE_PARTS:
            raise DataError(
                path, f"sizes[{i}].part", f"invalid value {size.part!r}", hint=f"one of {', '.join(SIZE_PARTS)}"
            )
    sections = {key: _list(path, raw, key) for key in raw if key not in KEYS}
    header = "".join(line for line in text.splitlines(keepends=True)[: _header_lines(text)]) or HEADER
    return Measurements(
        path=path, samples=samples, reuse=reuse, glue=glue, sizes=sizes, sections=sections, header=header
    )


def _header_lines(text: str) -> int:
    """How many lines the file's leading comment block has."""
    lines = text.splitlines()
    return next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))


def _list(path: Path, raw: dict, key: str) -> list:
    value = raw.get(key) or []
    if not isinstance(value, list):
        raise DataError(path, key, f"invalid value {value!r}", hint="a list of measurements")
    return value


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
    body.update({key: value for key, value in measurements.sections.items() if value})
    return measurements.header + yaml.safe_dump(body, sort_keys=False, width=120)


def append(path: Path, samples: list[Sample], reuse: list[ReuseRun]) -> Measurements:
    current = load(path) if path.exists() else Measurements(path=path, samples=(), reuse=())
    updated = replace(current, path=path, samples=current.samples + tuple(samples), reuse=current.reuse + tuple(reuse))
    path.write_text(dump(updated))
    return updated
