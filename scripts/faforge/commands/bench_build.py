"""Build cost: per-TU compile time and memory, per-cell totals, MAX_JOBS, and cross-python cache reuse.

Reports from variants/build-measurements.yaml; with --measure, first compiles a small TU subset in
two rattler-build-like trees (one python cold, a second python through the compiler cache the first
filled) and reports that run; --write appends it to the data file. With the file's glue and size
entries it also prints the matrix before and after the kernel split (faforge.bench.kernel_split); each
family's own section where it has timed compiles of its own (its plan namespace's cost_section: what each of
its packages costs and the piece jobs it splits into); and, for the pip world, the runner and CPU hours each
torch release adds (faforge.bench.pip_world_cost).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from faforge import paths
from faforge.backend.errors import BuildError
from faforge.backend.toolchain import find_cuda_home
from faforge.bench import build_cost as bench
from faforge.bench import kernel_split as split
from faforge.bench import pip_world_cost as pip_world
from faforge.bench.cache_reuse import TuRun
from faforge.buildcost import extrapolate_report
from faforge.costmodel import samples
from faforge.costmodel.runners import load_build_cost
from faforge.costmodel.section import CostSection
from faforge.errors import EXIT_OK, FaforgeError, why_not_a_folder
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN
from faforge.kernels.tus import parse_tu
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.options import int_range
from faforge.table import format_table

SCHEMA_VERSION = 1


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data", type=Path, default=None, help="measurements file (default: variants/build-measurements.yaml)"
    )
    parser.add_argument(
        "--runner",
        action="append",
        default=None,
        metavar="CPUS:GB",
        help="runner to extrapolate for: cores and GB of memory available to the build, e.g. "
        "2:22 (repeatable; default: 2:22 for a 24 GiB box, 4:14 for 16 GB, 8:30 for 32 GB)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON (version 1)")
    measure = parser.add_argument_group("measuring (slow: real nvcc compiles)")
    measure.add_argument("--measure", action="store_true", help="compile the TU subset in two python variants first")
    measure.add_argument("--sdist", type=Path, help=f"unpacked {FLASH_ATTN.package} sdist to take the TUs from")
    measure.add_argument(
        "--torch-include", type=Path, help="torch's include dir (site-packages/torch/include) of the cell's torch"
    )
    measure.add_argument("--pythons", default="3.11,3.12", help="the two python variants (default 3.11,3.12)")
    measure.add_argument(
        "--tus",
        default=",".join(bench.DEFAULT_TUS),
        help="comma-separated kernel TUs (default: the hdim32 fp16 TU of each class)",
    )
    measure.add_argument("--arch", default="80", help="one SM arch to compile for (default 80)")
    measure.add_argument(
        "--cxx11-abi", type=int, choices=[0, 1], default=1, help="the C++ ABI the TUs compile with (default 1)"
    )
    measure.add_argument("--nice", type=int_range(-20, 19), default=0, help="run nvcc under nice -n N (default 0)")
    measure.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="fresh dir for the build trees and the cache (default: .cache/buildcost/<time>)",
    )
    measure.add_argument(
        "--cuda-home",
        type=Path,
        default=None,
        help="the CUDA toolkit nvcc runs from (default: the build backend's: $CUDA_HOME, $CUDA_PATH, the nvcc on PATH, "
        "/usr/local/cuda)",
    )
    measure.add_argument("--write", action="store_true", help="append the measured numbers to the data file")


def _runner(spec: str) -> tuple[int, float]:
    """CPUS:GB with at least one core and some memory (the extrapolation divides by both)."""
    try:
        cpus_text, gb_text = spec.split(":")
        cpus, gb = int(cpus_text), float(gb_text)
    except ValueError:
        raise FaforgeError("expected CPUS:GB", input=f"--runner {spec}", hint="e.g. --runner 2:24") from None
    if not (1 <= cpus <= 4096 and 0 < gb < 1e6):
        raise FaforgeError(
            "a runner needs 1 to 4096 cores and more than 0 GB", input=f"--runner {spec}", hint="e.g. --runner 2:24"
        )
    return cpus, gb


def _measure_options(args: argparse.Namespace) -> tuple[list[str], list[str], Path]:
    """(pythons, TUs, CUDA toolkit) of --measure, every option checked before the first compile (they take
    minutes each). The toolkit is found here, not as the option's default, so that --help does not vary with it."""
    pythons = args.pythons.split(",")
    if len(pythons) != 2 or len(set(pythons)) != 2 or not all(re.fullmatch(r"3\.\d{1,2}", v) for v in pythons):
        raise FaforgeError(
            "--pythons needs two different Python versions",
            input=f"--pythons {args.pythons}",
            hint="e.g. --pythons 3.11,3.12",
        )
    tus = [t for t in args.tus.split(",") if t]
    if not tus:
        raise FaforgeError(
            "--tus names no kernel TU", input=f"--tus {args.tus}", hint=f"e.g. --tus {bench.DEFAULT_TUS[0]}"
        )
    for tu in tus:
        if Path(tu).name != tu:
            raise FaforgeError(f"--tus {tu}: a TU file name, not a path", hint=f"e.g. --tus {bench.DEFAULT_TUS[0]}")
        parse_tu(tu)
    if not re.fullmatch(r"\d{2,3}[af]?", args.arch):
        raise FaforgeError(
            "--arch is not an SM architecture", input=f"--arch {args.arch}", hint="e.g. --arch 80 or --arch 90a"
        )
    try:
        cuda_home = args.cuda_home or Path(find_cuda_home())
    except BuildError as exc:
        raise FaforgeError(f"no CUDA toolkit: {exc}", hint="pass --cuda-home DIR, the CUDA toolkit's folder") from None
    if not (cuda_home / "bin" / "nvcc").is_file():
        raise FaforgeError(
            f"--cuda-home {cuda_home}: no bin/nvcc there", hint="pass the CUDA toolkit's folder, e.g. /usr/local/cuda"
        )
    if args.workdir:
        paths.output_dir(args.workdir, "--workdir")
    if not (args.sdist and args.torch_include):
        raise FaforgeError(
            "--measure needs --sdist and --torch-include",
            hint=f"e.g. --sdist src/{FLASH_ATTN.module}-2.8.3.post2 "
            "--torch-include venv/lib/python3.11/site-packages/torch/include",
        )
    for option, folder in (("--sdist", args.sdist), ("--torch-include", args.torch_include)):
        if not folder.is_dir():
            raise FaforgeError(
                f"{option} {folder} {why_not_a_folder(folder)}",
                hint="pass a folder (an unpacked sdist; torch's include dir)",
            )
    if not (args.sdist / FLASH_ATTN.source_dir / "src").is_dir():
        raise FaforgeError(
            f"--sdist {args.sdist}: not an unpacked {FLASH_ATTN.package} sdist (no {FLASH_ATTN.source_dir}/src)",
            hint=f"unpack {FLASH_ATTN.module}-VERSION.tar.gz and pass its folder",
        )
    bench.torch_version_at(args.torch_include)
    return pythons, tus, cuda_home


def _measure(args: argparse.Namespace) -> bench.MeasureResult:
    versions, tus, cuda_home = _measure_options(args)
    workdir = args.workdir or paths.repo_root() / ".cache" / "buildcost" / time.strftime("%Y%m%d-%H%M%S")
    pythons = [(v, bench.python_include_dir(v)) for v in versions]
    result = bench.measure(
        workdir=workdir.resolve(),
        sdist=args.sdist.resolve(),
        torch_include=args.torch_include.resolve(),
        pythons=pythons,
        tus=tus,
        arch=args.arch,
        cxx11_abi=args.cxx11_abi,
        nice=args.nice,
        cuda_home=cuda_home,
        progress=lambda item: print(f"  {_progress_line(item)}", flush=True),
    )
    (workdir / "result.json").write_text(
        json.dumps({"samples": [asdict(s) for s in result.samples], "reuse": asdict(result.reuse)}, indent=2)
    )
    return result


def _progress_line(item: str | TuRun) -> str:
    if isinstance(item, str):
        return item
    t = item.timing
    return (
        f"{item.variant} {item.tu}: {t.wall_s:.0f}s wall, {t.cpu_s:.0f}s "
        f"cpu, {t.peak_rss_gb:.2f} GB, {item.hits} hit / {item.misses} miss"
    )


def execute(args: argparse.Namespace) -> int:
    runners = [_runner(r) for r in (args.runner or ["2:22", "4:14", "8:30"])]
    data_path = args.data or samples.default_path()
    measured = _measure(args) if args.measure else None
    if measured and args.write:
        samples.append(data_path, measured.samples, [measured.reuse])
    if measured and not args.write:  # report this run alone
        data = samples.Measurements(data_path, tuple(measured.samples), (measured.reuse,))
    else:
        data = samples.load(data_path)
    report = extrapolate_report.report(data, runners)
    matrix = load_matrix()
    before_after = (
        split.split_report(data, report.costs, matrix.cells, matrix.kernels) if data.glue and data.sizes else None
    )
    sections = [s for f in FAMILIES if (s := f.plan.cost_section(data, matrix, load_build_cost())) is not None]
    builds = pip_builds(matrix)
    pip_section = (
        pip_world.report(data, report.costs, builds, matrix.kernels, load_build_cost())
        if builds and data.glue and report.costs
        else None
    )
    if args.json:
        extra = (
            ({"kernel_split": before_after.as_json()} if before_after else {})
            | {s.key: s.as_json() for s in sections}
            | ({"pip_world": pip_section.as_json()} if pip_section else {})
        )
        print(json.dumps({"version": SCHEMA_VERSION, **report.as_json(), **extra}, indent=2))
        return EXIT_OK
    _print_tables(report.tables())
    if before_after:
        print(
            f"\nThe matrix before / after the kernel split ({FLASH_ATTN.kernel_package} "
            "once per platform, CUDA, archs and Philox layout)"
        )
        print(format_table(["", "before", "after"], before_after.rows()))
    for section in sections:
        print(f"\n{section.heading}")
        _print_section(section)
    if pip_section:
        _print_section(pip_section)
    return EXIT_OK


def _print_tables(tables: Iterable[tuple[str, list[str], list[list]]]) -> None:
    """Each (title, headers, rows) of a report, after a blank line."""
    for title, headers, rows in tables:
        print(f"\n{title}")
        print(format_table(headers, rows))


def _print_section(section: CostSection | pip_world.PipWorldReport) -> None:
    """A report section (a family's own, the pip world): its tables, a blank line, then its notes."""
    _print_tables(section.tables())
    print()
    for note in section.notes():
        print(note)
