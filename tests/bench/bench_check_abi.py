#!/usr/bin/env python
"""Benchmark: `faforge check-abi` against torch 2.14.1 vs an `nm -D` + `comm` baseline.

    .venv/bin/python tests/bench/bench_check_abi.py [--runs 5] [EXTENSION ...]

Default extensions are torch's own libtorch_cuda.so (~500 MB, ~3,400 imported
symbols, 12 SASS archs) and libtorch_python.so, each checked against the full
CUDA torch they ship with. The baseline lists the extension's undefined
symbols and the defined symbols of the same libraries the check loads with
`nm -D`, then `comm`s them: the same work without versions or explanations.
Prints wall and CPU seconds (median of --runs) for: the `faforge check-abi`
process (includes importing every faforge subcommand), a process importing
only faforge.abi (what `python -m faforge.abi.gate` pays), the check inside a
warm process, and the baseline. On a loaded machine compare the CPU columns.
No assertion: the numbers are for people (the issue's goal is under 1 s).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from faforge.abi.check import check_path  # noqa: E402 (after sys.path: the bench runs as a script)
from faforge.abi.elf import read_dynamic_symbols  # noqa: E402 (as above)
from tests.support.torch_envs import torch_env  # noqa: E402 (as above)

ABI_ONLY = (
    f"import sys; sys.path.insert(0, {str(REPO / 'scripts')!r}); from faforge.abi.check import check_path; "
    "sys.exit(0 if check_path(sys.argv[1], [sys.argv[2]]).ok else 1)"
)


def timed(command: list[str] | str, shell: bool = False) -> tuple[float, float]:
    """(wall, cpu of the children) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        command,
        shell=shell,
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        executable="/bin/bash" if shell else None,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_of(runs: int, command, shell: bool = False) -> tuple[float, float]:
    results = [timed(command, shell) for _ in range(runs)]
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def baseline_command(extension: Path, libraries: list[str]) -> str:
    libs = " ".join(f"'{lib}'" for lib in libraries)
    return (
        f"nm -D --undefined-only --without-symbol-versions '{extension}' | awk '{{print $2}}' | "
        "sort -u > /tmp/faforge-bench-und && "
        f"nm -D --defined-only --without-symbol-versions {libs} 2>/dev/null | awk 'NF==3{{print $3}}' | "
        "sort -u > /tmp/faforge-bench-def && "
        "comm -23 /tmp/faforge-bench-und /tmp/faforge-bench-def | wc -l"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extensions", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = torch_env("2.14.1")
    extensions = args.extensions or [env.torch_lib / "libtorch_cuda.so", env.torch_lib / "libtorch_python.so"]
    faforge = [str(Path(sys.executable).with_name("faforge"))]
    print(
        f"torch 2.14.1 at {env.site_packages}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
        f"median of {args.runs} runs"
    )
    print(
        f"{'extension':<20} {'MB':>4} {'imports':>7} | {'faforge check-abi':>17} | {'faforge.abi only':>16} | "
        f"{'in-process':>13} | {'nm -D + comm':>13}   (wall/cpu seconds)"
    )
    for ext in extensions:
        verdict = check_path(ext, [env.site_packages])  # also warms the page cache for every run below
        module = verdict.modules[0]
        runs = [_in_process(ext, env.site_packages) for _ in range(args.runs)]
        in_process = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        cli = median_of(args.runs, [*faforge, "check-abi", str(ext), "--against", str(env.site_packages), "--json"])
        library_only = median_of(args.runs, [sys.executable, "-c", ABI_ONLY, str(ext), str(env.site_packages)])
        libraries = [lib.path for lib in module.libraries if lib.path]
        base = median_of(args.runs, baseline_command(ext, libraries), shell=True)
        imports = len(read_dynamic_symbols(ext).undefined())
        cells = " | ".join(f"{wall:>7.2f}/{cpu:.2f}" for wall, cpu in (cli, library_only, in_process, base))
        print(f"{ext.name:<20} {ext.stat().st_size / 1e6:>4.0f} {imports:>7} | {cells}   ok={verdict.ok}")
    return 0


def _in_process(ext: Path, against: Path) -> tuple[float, float]:
    started, cpu = time.perf_counter(), time.process_time()
    check_path(ext, [against])
    return time.perf_counter() - started, time.process_time() - cpu


if __name__ == "__main__":
    sys.exit(main())
