"""The build-cost benchmark: `python -m faforge.bench.build_cost` (same as `faforge bench-build`).

Without --measure it reports from variants/build-measurements.yaml: per-TU-class cost, the
extrapolated cost of a cell for every arch list in variants/matrix.yaml, the MAX_JOBS the build
script picks on typical runners, and the measured cross-python reuse.  With --measure it first
compiles a small TU subset in two rattler-build-like trees (each TU in python A cold, then in
python B through the cache A filled) and reports those numbers; --write stores them.
"""

from __future__ import annotations

import datetime
import glob
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.backend import flags, toolchain
from faforge.bench import cache_reuse as reuse
from faforge.bench.cache_reuse import TuRun
from faforge.buildcost.layout import LayoutSources, make_layout
from faforge.buildcost.measure import CompileSpec
from faforge.costmodel.samples import ReuseRun, Sample
from faforge.errors import FaforgeError

DEFAULT_TUS = ("flash_fwd_hdim32_fp16_sm80.cu", "flash_fwd_split_hdim32_fp16_sm80.cu", "flash_bwd_hdim32_fp16_sm80.cu")
# Two rattler-build builds of one cell for two pythons: different build ids (unix times) and
# host-prefix placeholders of different lengths, as two output dirs of different depth give.
VARIANTS = (("1780000001", 80), ("1780004242", 131))


@dataclass(frozen=True)
class MeasureResult:
    samples: list[Sample]
    reuse: ReuseRun
    runs: list[TuRun]  # not reuse.TuRun: in this class `reuse` names the field above


def torch_version_at(torch_include: Path) -> str:
    version_py = torch_include.parent / "version.py"
    match = re.search(r"__version__\s*=\s*'([^'+]+)", version_py.read_text()) if version_py.is_file() else None
    if not match:
        raise FaforgeError(
            f"{torch_include}: no torch/version.py beside it",
            hint="pass torch's include dir, e.g. .../site-packages/torch/include",
        )
    return match.group(1)


def python_include_dir(version: str) -> Path:
    """Include dir of an installed CPython `version` (its own interpreter says where)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [
        f"python{version}",
        *sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True),
    ]
    for python in candidates:
        try:
            out = subprocess.run(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
        if Path(out, "Python.h").is_file():
            return Path(out)
    raise FaforgeError(
        f"no Python {version} with headers found",
        hint=f"install it (pyenv install {version}) or pass --python-include {version}=DIR",
    )


def machine_note(nice: int) -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"measured here on {datetime.date.today().isoformat()}, {os.cpu_count()} cores / {mem_gib:.0f} GiB "
        f"{platform.machine()}" + (f", nice {nice}" if nice else "")
    )


def measure(
    *,
    workdir: Path,
    sdist: Path,
    torch_include: Path,
    pythons: list[tuple[str, Path]],
    tus: list[str],
    arch: str,
    cxx11_abi: int,
    nice: int,
    cuda_home: Path,
    progress: Callable[[str | TuRun], None],
) -> MeasureResult:
    if len(pythons) != 2:
        raise FaforgeError("the reuse benchmark needs exactly two pythons", hint="e.g. --pythons 3.11,3.12")
    torch_version = torch_version_at(torch_include)
    nvcc = toolchain.nvcc_version(str(cuda_home / "bin" / "nvcc"))
    spec = CompileSpec(archs=arch, cxx_std=flags.cxx_standard(torch_version), cxx11_abi=cxx11_abi)
    ccache = reuse.find_ccache()
    cache_dir = workdir / "ccache"
    triplet = toolchain.cuda_triplet(platform.machine())
    layouts = []
    for (version, include), (build_id, placeholder) in zip(pythons, VARIANTS, strict=True):
        sources = LayoutSources(cuda_home=cuda_home, torch_include=torch_include, python_include=include, sdist=sdist)
        layouts.append(
            (
                f"py{version}",
                make_layout(
                    workdir,
                    build_id=build_id,
                    placeholder_length=placeholder,
                    python_version=version,
                    sources=sources,
                    tus=tus,
                    triplet=triplet,
                ),
            )
        )
        progress(
            f"laid out py{version}: {layouts[-1][1].root} (host prefix "
            f"{layouts[-1][1].host_env.name[:24]}..., {placeholder} chars)"
        )
    runs = []
    # TU by TU, the cold variant then the second one: a run cut short still pairs what it did.
    for tu in tus:
        for name, layout in layouts:
            runs += reuse.compile_variant(
                name, layout, [tu], spec, ccache=ccache, cache_dir=cache_dir, nice=nice, on_done=progress
            )
    first, second = layouts[0][0], layouts[1][0]
    cold = [r for r in runs if r.variant == first]
    warm = [r for r in runs if r.variant == second]
    note = machine_note(nice) + f", load {max(r.timing.load_avg for r in runs):.1f}"
    samples = [
        Sample(
            tu=r.tu,
            arch=arch,
            nvcc=f"{nvcc[0]}.{nvcc[1]}",
            torch=torch_version,
            cxx_std=spec.cxx_std,
            cpu_s=r.timing.cpu_s,
            wall_s=r.timing.wall_s,
            peak_rss_gb=r.timing.peak_rss_gb,
            source=note,
        )
        for r in cold
    ]
    ccache_version = subprocess.run([ccache, "--version"], capture_output=True, text=True, check=True).stdout.split(
        "\n"
    )[0]
    result = ReuseRun(
        tus=list(tus),
        arch=arch,
        first=first,
        second=second,
        cold_wall_s=round(sum(r.timing.wall_s for r in cold), 1),
        cold_cpu_s=round(sum(r.timing.cpu_s for r in cold), 1),
        second_wall_s=round(sum(r.timing.wall_s for r in warm), 1),
        second_cpu_s=round(sum(r.timing.cpu_s for r in warm), 1),
        hits=sum(r.hits for r in warm),
        misses=sum(r.misses for r in warm),
        cache=ccache_version.replace(" version", ""),
        source=note,
    )
    return MeasureResult(samples=samples, reuse=result, runs=runs)


if __name__ == "__main__":
    # `python -m faforge.bench.build_cost` is `faforge bench-build`: one parser, the CLI's. Only this
    # script entry reaches the CLI; imported, the module stays below it (tests/test_layers.py).
    from faforge.cli import main

    sys.exit(main(["bench-build", *sys.argv[1:]]))
