#!/usr/bin/env python
"""Benchmark: `faforge check-abi` against torch 2.14.1 vs an `nm -D` + `comm` baseline.

    .venv/bin/python tests/bench/bench_check_abi.py [--runs 5] [EXTENSION ...]

Default extensions are torch's own libtorch_cuda.so (~500 MB, ~3,400 imported
symbols, 12 SASS archs) and libtorch_python.so, each checked against the full
CUDA torch they ship with. The baseline lists the extension's undefined
symbols and the defined symbols of the same libraries the check loads with
`nm -D`, then `comm`s them: the same work without versions or explanations.
Prints wall and CPU seconds (median of --runs); no assertion, the numbers are
for people (the issue's goal is under 1 s for check-abi).
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

from faforge.abi.check import check_path  # noqa: E402
from tests.support.torch_envs import torch_env  # noqa: E402


def timed(command: list[str] | str, shell: bool = False) -> tuple[float, float]:
    """(wall, cpu of the children) seconds of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, shell=shell, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   executable="/bin/bash" if shell else None)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_of(runs: int, command, shell: bool = False) -> tuple[float, float]:
    results = [timed(command, shell) for _ in range(runs)]
    return statistics.median(r[0] for r in results), statistics.median(r[1] for r in results)


def baseline_command(extension: Path, libraries: list[str]) -> str:
    libs = " ".join(f"'{lib}'" for lib in libraries)
    return (f"nm -D --undefined-only --without-symbol-versions '{extension}' | awk '{{print $2}}' | sort -u > /tmp/faforge-bench-und && "
            f"nm -D --defined-only --without-symbol-versions {libs} 2>/dev/null | awk 'NF==3{{print $3}}' | sort -u > /tmp/faforge-bench-def && "
            "comm -23 /tmp/faforge-bench-und /tmp/faforge-bench-def | wc -l")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("extensions", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = torch_env("2.14.1")
    extensions = args.extensions or [env.torch_lib / "libtorch_cuda.so", env.torch_lib / "libtorch_python.so"]
    faforge = [str(Path(sys.executable).with_name("faforge"))]
    print(f"torch 2.14.1 at {env.site_packages}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"median of {args.runs} runs")
    print(f"{'extension':<24} {'MB':>6} {'imports':>8} {'check-abi wall/cpu':>19} {'in-process':>11} {'nm -D + comm wall/cpu':>22}")
    for ext in extensions:
        verdict = check_path(ext, [env.site_packages])  # also warms the page cache for every run below
        module = verdict.modules[0]
        in_process = statistics.median(_in_process(ext, env.site_packages) for _ in range(args.runs))
        cli = median_of(args.runs, [*faforge, "check-abi", str(ext), "--against", str(env.site_packages), "--json"])
        libraries = [lib.path for lib in module.libraries if lib.path]
        base = median_of(args.runs, baseline_command(ext, libraries), shell=True)
        from faforge.abi.elf import read_dynamic_symbols  # noqa: PLC0415

        imports = len(read_dynamic_symbols(ext).undefined())
        print(f"{ext.name:<24} {ext.stat().st_size / 1e6:>6.0f} {imports:>8} {cli[0]:>9.2f}s/{cli[1]:.2f}s "
              f"{in_process:>10.2f}s {base[0]:>12.2f}s/{base[1]:.2f}s   ok={verdict.ok}")
    return 0


def _in_process(ext: Path, against: Path) -> float:
    started = time.perf_counter()
    check_path(ext, [against])
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
