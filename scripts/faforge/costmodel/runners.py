"""Build cost of CI jobs (variants/build-cost.yaml) and how to split a kernel build that outgrows one.

The 72 kernel TUs are built once per kernel package (libflash-attn-kernels, one per platform, CUDA,
arch list and Philox layout: faforge.matrix.kernels); each cell's own job compiles only flash_api.cpp against its
torch and links it against that package. A kernel build too long for one job is split by TU class
(fwd, bwd, fwd_split), and a class further into equal runs of its TUs, until every piece fits the
runner's job limit; a final `kernels-link` job links the library from the pieces' objects and
packages it. Splitting by arch instead would leave per-arch objects whose fatbinaries must be merged
with nvcc -dlink/fatbinary before linking, which neither torch's build nor ours does; TU pieces are
ordinary object files that the final job links as they are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from faforge import paths
from faforge.backend.archs import parse_arch_list
from faforge.backend.errors import BuildError
from faforge.backend.jobs import WORST_CASE_GB_PER_JOB, derive_max_jobs
from faforge.datafile import load_yaml
from faforge.errors import DataError, FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels.tus import default_grid

HOST_TU = FLASH_ATTN.host_source
# Job parts (a plan job's `part`, `faforge build --part`): a kernel package built in one job, the
# final job of a split one, and a cell's own job; pieces are named after their TU class.
KERNELS_PART = "kernels"
KERNELS_LINK_PART = "kernels-link"
CELL_PART = "cell"


@dataclass(frozen=True)
class TuClass:
    name: str
    minutes_per_arch: float
    peak_gb: float


@dataclass(frozen=True)
class Runner:
    platform: str
    label: str
    cpus: int
    memory_gb: float
    job_limit_minutes: int


@dataclass(frozen=True)
class WheelRunner:
    """Where a pip cell's wheel job runs: its runner, PyPA's manylinux image of the platform's machine
    (whose glibc the glue's tag follows) and NVIDIA's CUDA repository for that image."""

    platform: str
    label: str
    container: str
    cuda_repo: str  # the .repo file dnf adds


@dataclass(frozen=True)
class Part:
    """One CI job: a whole kernel package ('kernels'), a TU run such as 'bwd-1of2', the final
    'kernels-link' of a split kernel package, or a cell's own 'cell' job."""

    name: str
    tus: tuple[str, ...]
    minutes: int  # estimate including setup and the safety factor; also the job's timeout


@dataclass(frozen=True)
class BuildCost:
    path: Path
    classes: tuple[TuClass, ...]
    host_tu_minutes: float
    setup_minutes: float
    link_minutes: float
    safety_factor: float
    runners: dict[str, Runner]
    max_jobs_per_matrix: int
    wheel_runners: dict[str, WheelRunner] = field(default_factory=dict)  # platforms without one get no wheel job
    # Peak GB of one nvcc job at the family's worst TU, which bounds MAX_JOBS (another family's model sets its own).
    worst_gb_per_job: float = WORST_CASE_GB_PER_JOB

    def tus(self, tu_class: str) -> tuple[str, ...]:
        return tuple(tu.name for tu in default_grid() if tu.tu_class == tu_class)

    def runner_for(self, platform: str) -> Runner:
        if platform not in self.runners:
            raise DataError(
                self.path,
                "runners",
                f"no runner for {platform}",
                hint=f"add `{platform}: {{label: ..., cpus: ..., memory_gb: ..., job_limit_minutes: ...}}`",
            )
        return self.runners[platform]


def sass_archs(cuda_archs: str) -> int:
    """SASS arch count of '80;90;120+PTX' (3): `+PTX` on an arch that also gets SASS costs nothing
    extra (faforge.costmodel.extrapolate, from `nvcc --dryrun`)."""
    try:
        return len(parse_arch_list(cuda_archs))
    except BuildError as exc:
        raise FaforgeError(f"cuda_archs {cuda_archs!r}: {exc}") from None


def parallel_jobs(runner: Runner, n_archs: int, worst_gb: float = WORST_CASE_GB_PER_JOB) -> int:
    """nvcc jobs the build script runs at once on this runner (MAX_JOBS derived from memory)."""
    return derive_max_jobs(runner.memory_gb, runner.cpus, n_archs, 1, worst_gb=worst_gb)


def _minutes(cost: BuildCost, compile_minutes: float, fixed: float) -> int:
    return math.ceil(cost.setup_minutes + fixed + cost.safety_factor * compile_minutes)


def split_kernels(cost: BuildCost, platform: str, cuda_archs: str) -> list[Part]:
    """The jobs one kernel package needs on its runner: [kernels], or TU pieces then kernels-link."""
    runner = cost.runner_for(platform)
    n_archs = sass_archs(cuda_archs)
    jobs = parallel_jobs(runner, n_archs, cost.worst_gb_per_job)
    per_tu = {c.name: c.minutes_per_arch * n_archs / jobs for c in cost.classes}
    all_tus = [(c.name, tu) for c in cost.classes for tu in cost.tus(c.name)]
    whole = _minutes(cost, sum(per_tu[c] for c, _ in all_tus), 0)
    if whole <= runner.job_limit_minutes:
        return [Part(name=KERNELS_PART, tus=(), minutes=whole)]
    parts = []
    for tu_class in cost.classes:
        tus = cost.tus(tu_class.name)
        for pieces in range(1, len(tus) + 1):
            size = math.ceil(len(tus) / pieces)
            minutes = _minutes(cost, size * per_tu[tu_class.name], 0)
            if minutes <= runner.job_limit_minutes:
                break
        else:
            raise FaforgeError(
                f"one {tu_class.name} TU with archs {cuda_archs} needs more "
                f"than {runner.job_limit_minutes} minutes on {runner.label}",
                hint=f"use a bigger runner for {platform} in {cost.path.name}, or fewer archs in matrix.yaml",
            )
        pieces = math.ceil(len(tus) / size)
        for i in range(pieces):
            chunk = tus[i * size : (i + 1) * size]
            name = tu_class.name if pieces == 1 else f"{tu_class.name}-{i + 1}of{pieces}"
            parts.append(Part(name=name, tus=chunk, minutes=_minutes(cost, len(chunk) * per_tu[tu_class.name], 0)))
    parts.append(Part(name=KERNELS_LINK_PART, tus=(), minutes=_minutes(cost, 0, cost.link_minutes)))
    return parts


def cell_part(cost: BuildCost) -> Part:
    """A cell's own job: flash_api.cpp against the cell's torch, linked against its kernel package."""
    return Part(name=CELL_PART, tus=(HOST_TU,), minutes=_minutes(cost, cost.host_tu_minutes, cost.link_minutes))


def _number(path, key, value, *, integer=False):
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value < 0:
        raise DataError(path, key, f"invalid value {value!r}", hint="a non-negative number")
    return value


def load_build_cost(path: Path | None = None) -> BuildCost:
    path = path or paths.variants_dir() / "build-cost.yaml"
    raw = load_yaml(path)
    if not isinstance(raw, dict) or raw.get("schema") != 1:
        raise DataError(path, "schema", "expected schema: 1")
    classes_raw = raw.get("classes")
    if not isinstance(classes_raw, dict) or not classes_raw:
        raise DataError(path, "classes", "expected a mapping of TU class -> {minutes_per_arch, peak_gb}")
    classes = []
    for name, entry in classes_raw.items():
        if not isinstance(entry, dict) or set(entry) != {"minutes_per_arch", "peak_gb"}:
            raise DataError(path, f"classes.{name}", f"invalid value {entry!r}", hint="keys: minutes_per_arch, peak_gb")
        classes.append(
            TuClass(
                name=name,
                minutes_per_arch=_number(path, f"classes.{name}.minutes_per_arch", entry["minutes_per_arch"]),
                peak_gb=_number(path, f"classes.{name}.peak_gb", entry["peak_gb"]),
            )
        )
    runners = {}
    for platform, entry in (raw.get("runners") or {}).items():
        keys = {"label", "cpus", "memory_gb", "job_limit_minutes"}
        if not isinstance(entry, dict) or set(entry) != keys or not isinstance(entry["label"], str):
            raise DataError(
                path, f"runners.{platform}", f"invalid value {entry!r}", hint=f"keys: {', '.join(sorted(keys))}"
            )
        runners[platform] = Runner(
            platform=platform,
            label=entry["label"],
            cpus=_number(path, f"runners.{platform}.cpus", entry["cpus"], integer=True),
            memory_gb=_number(path, f"runners.{platform}.memory_gb", entry["memory_gb"]),
            job_limit_minutes=_number(
                path, f"runners.{platform}.job_limit_minutes", entry["job_limit_minutes"], integer=True
            ),
        )
    wheel_runners = {}
    for platform, entry in (raw.get("wheel_runners") or {}).items():
        keys = {"label", "container", "cuda_repo"}
        if (
            not isinstance(entry, dict)
            or set(entry) != keys
            or not all(isinstance(v, str) and v for v in entry.values())
        ):
            raise DataError(
                path,
                f"wheel_runners.{platform}",
                f"invalid value {entry!r}",
                hint=f"keys: {', '.join(sorted(keys))} (strings)",
            )
        wheel_runners[platform] = WheelRunner(platform=platform, **entry)
    return BuildCost(
        path=path,
        classes=tuple(classes),
        host_tu_minutes=_number(path, "host_tu_minutes", raw.get("host_tu_minutes")),
        setup_minutes=_number(path, "setup_minutes", raw.get("setup_minutes")),
        link_minutes=_number(path, "link_minutes", raw.get("link_minutes")),
        safety_factor=_number(path, "safety_factor", raw.get("safety_factor")),
        runners=runners,
        max_jobs_per_matrix=_number(path, "max_jobs_per_matrix", raw.get("max_jobs_per_matrix"), integer=True),
        wheel_runners=wheel_runners,
    )
