"""`faforge build PIP_CELL` (the pip world): a pip cell's glue wheel and kernel wheel, from the kernel package of
its key.

  1. the kernel package: one given (--kernel-package), one already in the output folder, one in the kernel
     channel (--kernel-channel, where an earlier run published it), or else (part `all`) built here exactly as
     `faforge build CELL --part kernels` builds it for conda: the recipe's libflash-attn-kernels output, rendered
     from a conda cell of the same kernel key when there is one (the same package), else from the pip world's
     variant file (a key only pip cells have: faforge.matrix.pip_builds);
  2. the raw glue: recipes/flash-attn/build_flash_attn.py --kernel-library <that package's library>, run by a
     Python whose torch is the cell's PyPI torch (faforge.release.clean_env's cached base venv of the cell's torch
     and Python, the one verify's import gate uses, with the build tools layered on top through PYTHONPATH), with
     the cell's CUDA toolkit (--cuda-home, else the build backend's: faforge.backend.toolchain.find_cuda_home; its
     release must be the cell's) and the flash-attn sdist (--source, or the recipe's own from PyPI,
     sha256-checked): flash_api.cpp alone;
  3. the wheels (faforge.pipwheel): the kernel wheel is the kernel package's lib/libflash_attn_kernels.so.1 with
     only its RUNPATH set for pip's layout; the glue wheel is the raw wheel with its pip identity. Their names must
     be the ones the matrix gives them (PipBuild.glue_wheel, kernel_wheel).
No kernel TU is compiled here: the kernel package's objects are the conda build's. The wheels go to
OUTPUT_DIR/dist/, a kernel package built here to OUTPUT_DIR/<platform>/ as for conda, logs to OUTPUT_DIR/logs/.
A cell whose two wheels are already in OUTPUT_DIR/dist/ is `present` (resumable). One cell's failure never stops
the others. A machine builds its own platform's cells as above (CI: linux-aarch64 ones on an arm64 runner); on
x86_64 a linux-aarch64 pip cell is cross-built instead (faforge.release.build.pip_target checks which, and the cross
inputs, before any work), as conda's cross builds are: the glue against the
aarch64 torch in --torch-site, read from its files and never imported (build_flash_attn.py --torch-site,
faforge.backend.foreign), with the headers and libpython of the aarch64 CPython --target-python names, the cross
g++ ($CXX, else aarch64-linux-gnu-g++) and --cuda-home's targets/sbsa-linux tree.
This module runs the cells one after the other; what a cell reads first is faforge.release.build.pip_inputs', steps 2
and 3 are faforge.release.build.pip_wheels'.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from faforge.costmodel.runners import KERNELS_PART
from faforge.errors import FaforgeError
from faforge.matrix import Matrix
from faforge.matrix.kernels import kernel_key
from faforge.matrix.pip_builds import PipBuild
from faforge.release.build.pip_inputs import (
    WHEEL_DIR,
    WheelWhere,
    build_kernel_package,
    find_kernel_package,
    flash_attn_sdist,
    kernel_pin_of,
)
from faforge.release.build.pip_wheels import make_wheels
from faforge.release.plan.jobs import job_slug
from faforge.release.plan.pip import WHEEL_PART
from faforge.release.reporter import Reporter
from faforge.release.venv_cache import Unavailable


@dataclass(frozen=True)
class WheelBuild:
    """One pip cell's build: the CellBuild fields (the summary table reads them) and the wheels."""

    cell: str
    part: str
    status: str  # built | present | failed
    seconds: float
    package: Path | None  # the glue wheel
    log: Path
    error: str | None = None
    cache: str = "-"
    kernel_wheel: Path | None = None
    details: dict = field(default_factory=dict)  # --json's `wheel` object


def present_wheels(build: PipBuild, dist: Path) -> tuple[Path, Path] | None:
    """The cell's two wheels already in `dist`, under the names the matrix gives them."""
    names = sorted(os.listdir(dist)) if dist.is_dir() else []
    glue = next((dist / n for n in names if fnmatch.fnmatchcase(n, build.glue_wheel())), None)
    kernel = next((dist / n for n in names if fnmatch.fnmatchcase(n, build.kernel_wheel())), None)
    return (glue, kernel) if glue and kernel else None


def build_one(
    build: PipBuild, part: str, matrix: Matrix, where: WheelWhere, report: Reporter, title: str, built_kernels: dict
) -> WheelBuild:
    """One pip cell, start to end; a failure becomes a `failed` entry, never an exception."""
    started = time.monotonic()
    cell = build.cell
    log_path = where.log_dir / f"{job_slug(cell.id, WHEEL_PART)}.log"
    dist = where.output_dir / WHEEL_DIR
    present = present_wheels(build, dist)
    if present:
        report.say(f"{title}: both wheels already in {dist}: {present[0].name}, {present[1].name}")
        return WheelBuild(
            cell=cell.id,
            part=part,
            status="present",
            seconds=0.0,
            package=present[0],
            log=log_path,
            kernel_wheel=present[1],
            details={
                "glue": {"path": str(present[0]), "filename": present[0].name},
                "kernel": {"path": str(present[1]), "filename": present[1].name},
            },
        )

    def failed(message: str) -> WheelBuild:
        report.warn(f"{cell.id} failed: {message}; log: {log_path}")
        return WheelBuild(
            cell=cell.id,
            part=part,
            status="failed",
            seconds=time.monotonic() - started,
            package=None,
            log=log_path,
            error=message,
        )

    key = kernel_key(cell)
    try:
        found = find_kernel_package(build, where, report)
        if found is None and part == "all" and key not in built_kernels:
            built_kernels[key] = build_kernel_package(build, matrix, where, report, title)
    except FaforgeError as exc:  # a channel that cannot be read, a kernel package of another build: this cell fails
        return failed(exc.line())
    if found is None and part == "all":
        result = built_kernels[key]
        if result.status == "failed":
            return failed(f"its kernel package failed to build ({result.error}; log {result.log})")
        found = (result.package, "built in this run" if result.status == "built" else "output folder")
    if found is None:
        return failed(
            f"its kernel package {kernel_pin_of(build).filename()} is not given (--kernel-package), not in "
            f"{where.output_dir / cell.platform}, and no --kernel-channel is named; its kernel job builds it "
            f"(`faforge build {cell.id} --part {KERNELS_PART}`), or --part all builds it first"
        )
    where.log_dir.mkdir(parents=True, exist_ok=True)
    with (
        open(log_path, "w") as log,
        report.step(f"{title}: glue and kernel wheels") as state,
        tempfile.TemporaryDirectory(prefix=f".{job_slug(cell.id, WHEEL_PART)}-", dir=where.output_dir) as tmp,
    ):
        log.write(f"pip cell {cell.id}: kernel package {found[0]} ({found[1]})\n")
        try:
            sdist = where.source_path or flash_attn_sdist(matrix)
            details = make_wheels(build, found[0], found[1], where, report, title, log, Path(tmp), sdist)
        except (FaforgeError, Unavailable) as exc:
            message = exc.line() if isinstance(exc, FaforgeError) else str(exc)
            log.write(f"FAILED: {message}\n")
            state.failed = True
            return failed(message)
    return WheelBuild(
        cell=cell.id,
        part=part,
        status="built",
        seconds=time.monotonic() - started,
        package=Path(details["glue"]["path"]),
        log=log_path,
        kernel_wheel=Path(details["kernel"]["path"]),
        details=details,
    )


def build_wheels(
    jobs: list[tuple[PipBuild, str]], matrix: Matrix, where: WheelWhere, report: Reporter, first: int, total: int
) -> list[WheelBuild]:
    """Each pip cell's wheels in order (its kernel package first where none is found: once per kernel key)."""
    built_kernels: dict = {}
    return [
        build_one(build, part, matrix, where, report, f"[{i}/{total}] {build.cell.id}", built_kernels)
        for i, (build, part) in enumerate(jobs, first)
    ]
