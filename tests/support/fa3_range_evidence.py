"""The stable-ABI evidence for FA3, by hand outside CI: a flash-attn-3 binary against every torch minor of its range.

    python -m tests.support.fa3_range_evidence EXTENSION [VERSION ...]   (default: 2.9.1 2.10.0 2.11.0 2.12.1 2.13.0)
    python -m tests.support.fa3_range_evidence --machine aarch64 EXTENSION RUNTIME_LIB [VERSION ...]
        (an aarch64 build, e.g. the trimmed canary cross-built; RUNTIME_LIB: an aarch64 libcudart.so.13's folder;
        PyPI's aarch64 torch is a CUDA build from 2.11 on, CPU-only before)

For each release: PyPI's x86_64 CPython 3.11 wheel's libc10, libtorch_cpu (tests/support/torch_release_libs.py),
libc10_cuda, libtorch_cuda (0.5-1 GB each) and libtorch_nvshmem, read by range requests into the test cache, then
`faforge check-abi --stable-abi` with PyPI's CUDA 13.0 runtime beside them (a cu130 package's; PyPI's default 2.9
and 2.10 wheels are cu128, whose stable C functions are the same). One JSON line per release.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from faforge.release.clean_env import cuda_runtime_venv
from faforge.versions import vtuple
from faforge.wheelfetch import fetch_member
from tests.support.pypi import pypi_listing
from tests.support.torch_release_libs import LIBS, release_torch_lib, release_wheel

CUDA_MEMBERS = ("torch/lib/libc10_cuda.so", "torch/lib/libtorch_cuda.so", "torch/lib/libtorch_nvshmem.so")
RANGE = ("2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0")


def check(extension: Path, version: str, runtime: Path, machine: str = "x86_64") -> dict:
    lib = release_torch_lib(version, machine)
    remote = pypi_listing("torch")[release_wheel(version, machine)]
    for member in CUDA_MEMBERS:
        if not (LIBS / release_wheel(version, machine) / member).is_file():
            fetch_member(remote, member, LIBS)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "check-abi",
            str(extension),
            "--stable-abi",
            "--against",
            str(lib),
            "--library-dir",
            str(runtime),
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    report = json.loads(run.stdout)
    return {
        "torch": version,
        "exit": run.returncode,
        "ok": report.get("ok"),
        "checked": [r["torch"] for r in report.get("releases", [])],
        "stable_imports": len(report.get("stable_imports", [])),
        "unstable_imports": len(report.get("unstable_imports", [])),
        "problems": sorted({p["kind"] for r in report.get("releases", []) for p in r["report"]["problems"]}),
    }


def main(argv: list[str]) -> int:
    machine = "x86_64"
    if argv[:1] == ["--machine"]:
        machine, argv = argv[1], argv[2:]
    extension = Path(argv[0])
    if machine == "x86_64":
        runtime, versions = cuda_runtime_venv("13.0").cudart()[0].parent, argv[1:] or list(RANGE)
    else:
        runtime, versions = Path(argv[1]), argv[2:] or [v for v in RANGE if vtuple(v) >= (2, 11)]
    results = [check(extension, v, runtime, machine) for v in versions]
    for result in results:
        print(json.dumps(result), flush=True)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
