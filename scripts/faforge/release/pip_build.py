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
x86_64 a linux-aarch64 pip cell is cross-built instead (faforge.release.pip_target checks which, and the cross
inputs, before any work), as conda's cross builds are: the glue against the
aarch64 torch in --torch-site, read from its files and never imported (build_flash_attn.py --torch-site,
faforge.backend.foreign), with the headers and libpython of the aarch64 CPython --target-python names, the cross
g++ ($CXX, else aarch64-linux-gnu-g++) and --cuda-home's targets/sbsa-linux tree.
"""

from __future__ import annotations

import fnmatch
import os
import shlex
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from faforge import config, paths
from faforge.abi.elf import read_info
from faforge.backend.errors import BuildError
from faforge.backend.logger import PREFIX as BACKEND_LOG_PREFIX
from faforge.backend.toolchain import find_cuda_home, nvcc_version
from faforge.errors import EXIT_PROBLEMS, FaforgeError, RemoteError
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix
from faforge.matrix.kernels import KERNEL_PACKAGE, KernelPin, kernel_key
from faforge.matrix.pip_builds import PipBuild
from faforge.matrix.render import SourceOverride, recipe_file, render_kernel_output
from faforge.packagefile import sha256_of
from faforge.release import clean_env
from faforge.release.build import CellBuild, build_cell
from faforge.release.cost import KERNELS_PART
from faforge.release.kernel_package import fetch_kernel_package
from faforge.release.package import PackageFacts, read_package
from faforge.release.pip_plan import WHEEL_PART
from faforge.release.pip_target import CROSS_MACHINE, CrossTarget
from faforge.release.plan import job_slug
from faforge.release.reporter import Reporter
from faforge.wheelfetch import download_checked, list_files

if TYPE_CHECKING:
    from faforge.pipwheel.built import BuiltWheel

WHEEL_DIR = "dist"
# The build tools the glue's build needs beside torch (recipes/flash-attn/recipe.yaml's host requirements of the
# flash-attn output: ninja for torch's cpp_extension, setuptools and wheel for the wheel, pyelftools for the
# backend's ABI check after the link), in a cached venv of their own, so that the torch venv stays verify's.
BUILD_TOOLS = ("ninja", "pyelftools", "setuptools<82", "wheel")
GLUE_TIMEOUT_S = 3 * 3600
# The build script's own lines, shown live: its steps (`[build_flash_attn] ...`) and its error
# (`build_flash_attn: error: ...`).
BACKEND_LINES = (BACKEND_LOG_PREFIX, f"{Path(FLASH_ATTN.build_script).stem}:")


@dataclass(frozen=True)
class WheelWhere:
    """Where a pip build reads and writes, and what it may build its kernel package with."""

    output_dir: Path
    log_dir: Path
    source: SourceOverride | None  # --source, or None: the recipe's PyPI sdist
    source_path: Path | None
    kernel_packages: tuple[PackageFacts, ...]  # --kernel-package, read
    kernel_channel: str | None
    cuda_home: Path | None  # --cuda-home
    cross: CrossTarget | None = None  # --torch-site and --target-python, for linux-aarch64 pip cells
    channel_aliases: dict[str, str] = field(default_factory=dict)
    extra_channels: list[str] = field(default_factory=list)


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


# ---------------------------------------------------------------- checks before any work


def cuda_toolkit(given: Path | None, cuda: str) -> Path:
    """The CUDA toolkit of release `cuda` ('13.0'): --cuda-home, else the one the backend finds
    (faforge.backend.toolchain.find_cuda_home), checked to hold nvcc and cuda_runtime.h of that release."""
    option = "--cuda-home" if given else "the CUDA toolkit found (CUDA_HOME, CUDA_PATH or the nvcc on PATH)"
    hint = f"pass --cuda-home of a CUDA {cuda} toolkit (its bin/nvcc and include/cuda_runtime.h)"
    try:
        root = given or Path(find_cuda_home())
    except BuildError as exc:
        raise FaforgeError(f"no CUDA toolkit: {exc}", hint=hint) from None
    with paths.user_path(option, root):
        if not (root / "bin" / "nvcc").is_file() or not (root / "include" / "cuda_runtime.h").is_file():
            raise FaforgeError(
                f"{option} {root}: no bin/nvcc and include/cuda_runtime.h there", hint=hint, input=str(root)
            )
    try:
        found = ".".join(map(str, nvcc_version(str(root / "bin" / "nvcc"))))
    except BuildError as exc:
        raise FaforgeError(str(exc), hint=hint, input=str(root)) from None
    if found != cuda:
        raise FaforgeError(
            f"{option} {root} is CUDA {found}; the cell's torch is built for CUDA {cuda}", hint=hint, input=str(root)
        )
    return root


def kernel_pin_of(build: PipBuild) -> KernelPin:
    return KernelPin(version=build.kernel.version, build=build.kernel_build)


def match_given(builds: list[PipBuild], given: tuple[PackageFacts, ...]) -> None:
    """Each --kernel-package is the kernel package of a requested cell: its exact build and platform."""
    wanted = {(kernel_pin_of(b).version, kernel_pin_of(b).build, b.cell.platform): b for b in builds}
    for package in given:
        if not package.is_kernel_package:
            raise FaforgeError(
                f"--kernel-package {package.path}: a {package.name} package, not {KERNEL_PACKAGE}",
                input=str(package.path),
                hint=f"pass the {KERNEL_PACKAGE} package `faforge build PIP_CELL --part {KERNELS_PART}` made",
            )
        if (package.version, package.build, package.subdir) not in wanted:
            builds_text = ", ".join(sorted({f"{b.kernel_build} ({b.cell.platform})" for b in builds}))
            raise FaforgeError(
                f"--kernel-package {package.path}: {package.version} {package.build} ({package.subdir}) is the kernel "
                f"package of none of these cells, which pin {builds_text}",
                input=str(package.path),
                hint="pass the exact kernel build `faforge matrix --world pypi` lists for the cell (its hash included)",
            )


# ---------------------------------------------------------------- the steps


def present_wheels(build: PipBuild, dist: Path) -> tuple[Path, Path] | None:
    """The cell's two wheels already in `dist`, under the names the matrix gives them."""
    names = sorted(os.listdir(dist)) if dist.is_dir() else []
    glue = next((dist / n for n in names if fnmatch.fnmatchcase(n, build.glue_wheel())), None)
    kernel = next((dist / n for n in names if fnmatch.fnmatchcase(n, build.kernel_wheel())), None)
    return (glue, kernel) if glue and kernel else None


def find_kernel_package(build: PipBuild, where: WheelWhere, report: Reporter) -> tuple[Path, str] | None:
    """(the kernel package's file, where it came from): given, the output folder, or the kernel channel."""
    pin = kernel_pin_of(build)
    for package in where.kernel_packages:
        if (package.version, package.build, package.subdir) == (pin.version, pin.build, build.cell.platform):
            return package.path, "given"
    beside = where.output_dir / build.cell.platform / pin.filename()
    if beside.is_file():
        return beside, "output folder"
    if where.kernel_channel:
        report.say(f"  kernel package {pin.filename()} from {where.kernel_channel}")
        return fetch_kernel_package(pin, build.cell.platform, where.kernel_channel), where.kernel_channel
    return None


def build_kernel_package(build: PipBuild, matrix: Matrix, where: WheelWhere, report: Reporter, title: str) -> CellBuild:
    """The kernel package as `faforge build CELL --part kernels` builds it (a conda cell of the key when there is
    one: the same package, else the pip cell itself), into OUTPUT_DIR/<platform>/."""
    key = kernel_key(build.cell)
    conda = next((c for c in matrix.cells if kernel_key(c) == key), None)
    cell = conda or build.cell
    with (
        recipe_file(matrix.recipe_path, where.source) as recipe_path,
        report.step(f"{title}: kernel package {key.id} (rendered for {cell.id})") as state,
    ):
        rendered = render_kernel_output(cell, recipe_path, matrix.variants_dir)
        result = build_cell(
            rendered,
            output_dir=where.output_dir,
            log_dir=where.log_dir,
            part=KERNELS_PART,
            live=lambda line: report.say(f"  {title}: {line}"),
            channel_aliases=where.channel_aliases,
            extra_channels=where.extra_channels,
        )
        state.failed = result.status == "failed"
    if (
        result.status != "failed"
        and result.package is not None
        and result.package.name != kernel_pin_of(build).filename()
    ):
        raise FaforgeError(
            f"{build.cell.id}: the kernel package built is {result.package.name}, but the matrix pins "
            f"{kernel_pin_of(build).filename()}",
            hint="run `faforge generate` to refresh variants/, then build again",
            exit_code=EXIT_PROBLEMS,
        )
    return result


def flash_attn_sdist(matrix: Matrix) -> Path:
    """The recipe's sdist from PyPI, sha256-checked against variants/matrix.yaml, cached under faforge's cache."""
    version, sha256 = matrix.policy.flash_attn_version, matrix.policy.flash_attn_sha256
    name = f"{FLASH_ATTN.dist_name}-{version}.tar.gz"
    target = config.cache_dir() / f"{FLASH_ATTN.package}-sdist" / name
    if target.is_file() and sha256_of(target) == sha256:
        return target
    url = next((f.url for f in list_files(FLASH_ATTN.package) if f.filename == name), None)
    if url is None:
        raise RemoteError(
            f"{name}: the package index does not list it",
            hint=f"check {FLASH_ATTN.key}.version in variants/matrix.yaml, or pass --source SDIST",
        )
    return download_checked(
        url,
        sha256,
        target,
        lambda got: RemoteError(
            f"{url}: sha256 {got[:12]}…, variants/matrix.yaml says {sha256[:12]}…",
            hint="the download was cut or the file changed: retry, or pass --source SDIST",
        ),
    )


def unpack_sdist(sdist: Path, work: Path) -> Path:
    """The sdist's one top folder, unpacked into `work` (tar's data filter: no links out, no devices)."""
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    tops = [p for p in work.iterdir() if p.is_dir()]
    if len(tops) != 1 or not (tops[0] / FLASH_ATTN.host_source).is_file():
        raise FaforgeError(
            f"{sdist}: not a {FLASH_ATTN.package} sdist (one top folder holding {FLASH_ATTN.host_source})",
            hint=f"pass the {FLASH_ATTN.package} sdist (.tar.gz) as PyPI serves it",
            input=str(sdist),
        )
    return tops[0]


def build_tools_venv(python: str, say: Callable[[str], None]) -> Path:
    """The cached venv of the glue build's tools (BUILD_TOOLS) for CPython `python`; its site-packages."""
    prefix = clean_env._cached_venv(
        "build-tools", f"pip-glue-py{python}", python, list(BUILD_TOOLS), "the glue build's tools", say
    )
    return next((prefix / "lib").glob("python3*/site-packages"))


def run_logged(command: list[str], env: dict, log: TextIO, report: Reporter, title: str, timeout: int) -> int:
    """Run `command`, every line to the log, the backend's own step lines (`build_flash_attn:`) to the terminal."""
    report.say(f"+ {shlex.join(command)}")
    log.write(f"+ {shlex.join(command)}\n")
    log.flush()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, errors="replace"
    ) as proc:
        watchdog = threading.Timer(timeout, proc.kill)  # a silent hang ends too
        watchdog.start()
        try:
            assert proc.stdout is not None  # opened with stdout=PIPE
            for line in proc.stdout:
                log.write(line)
                if line.startswith(BACKEND_LINES) or "error" in line.lower():
                    report.say(f"  {title}: {line.rstrip()[:300]}")
            code = proc.wait()
        finally:
            watchdog.cancel()
        if code < 0:
            log.write(f"killed (signal {-code}) after at most {timeout} s\n")
        return code


def glue_env(tools_site: Path, cuda_home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "FAFORGE_BUILD_TUS")}
    env["PYTHONPATH"] = str(tools_site)
    env["PATH"] = os.pathsep.join([str(tools_site.parents[2] / "bin"), env.get("PATH", "")])
    env["CUDA_HOME"] = str(cuda_home)
    return env


def torch_metadata(site: Path) -> Path:
    found = sorted(site.glob("torch-*.dist-info/METADATA"))
    if len(found) != 1:
        raise FaforgeError(
            f"{site}: {len(found)} torch METADATA files, not one", hint="remove the cached venv so it is made anew"
        )
    return found[0]


def wheel_json(built: BuiltWheel, was: dict | None = None) -> dict:
    facts = built.facts
    out = {
        "path": str(built.path),
        "filename": facts.filename,
        "version": facts.version,
        "build_tag": facts.build_tag,
        "platform_tag": built.verdict.tag,
        "sha256": facts.sha256,
        "size": facts.size,
        "runpath": list(built.runpath),
        "requires_dist": list(facts.requires_dist),
        "seconds": round(built.seconds, 3),
    }
    return out | ({"was": was} if was is not None else {})


def make_wheels(
    build: PipBuild,
    kernel: Path,
    kernel_from: str,
    where: WheelWhere,
    report: Reporter,
    title: str,
    log: TextIO,
    work: Path,
    sdist: Path,
) -> dict:
    """Steps 2 and 3 for one cell, its kernel package found; the --json `wheel` object."""
    from faforge.pipwheel.facts import requires_dist_of  # noqa: PLC0415 (pip cells only)
    from faforge.pipwheel.glue import GlueCell, repack_glue_wheel  # noqa: PLC0415 (pip cells only)
    from faforge.pipwheel.kernel import (  # noqa: PLC0415 (pip cells only)
        pack_kernel_wheel,
        runtime_range_of_kernel_wheel,
        unpack_kernel_package,
    )

    cell = build.cell
    steps = {}
    dist = where.output_dir / WHEEL_DIR
    dist.mkdir(parents=True, exist_ok=True)
    cuda_home = cuda_toolkit(where.cuda_home, cell.cuda)
    started = time.monotonic()
    tools = build_tools_venv(cell.python, report.say)
    if (
        where.cross
    ):  # linux-aarch64: the target torch read from its files, the glue script run by the tools venv's Python
        target = where.cross
        torch_version, torch_site, python = target.torch, target.torch_site, tools.parents[2] / "bin" / "python"
        target_args = [
            "--torch-site",
            str(target.torch_site),
            *(a for d in target.python_includes for a in ("--python-include", d)),
        ]
        target_env = {"target_platform": cell.platform, "build_platform": clean_env.MACHINE_SUBDIRS[CROSS_MACHINE]}
    else:
        venv = clean_env.pypi_torch_venv(f"=={cell.torch}", cell.python, clean_env.BASE_EXTRAS, announce=report.say)
        if (venv.torch.split("+")[0], venv.cuda, venv.cxx11_abi) != (cell.torch, cell.cuda, cell.cxx11_abi):
            raise FaforgeError(
                f"{cell.id}: PyPI's torch=={cell.torch} in {venv.prefix} is {venv.torch} for CUDA {venv.cuda}, C++ ABI "
                f"{venv.cxx11_abi}; the cell says CUDA {cell.cuda}, ABI {cell.cxx11_abi}",
                exit_code=EXIT_PROBLEMS,
                hint="the pypi world's row in variants/releases.yaml disagrees with PyPI: `faforge bump --source pypi`",
            )
        torch_version, torch_site, python, target_args, target_env = venv.torch, venv.site_packages, venv.python, [], {}
    steps["venvs"] = time.monotonic() - started
    kernel_facts = read_package(kernel)
    package = unpack_kernel_package(
        kernel,
        work / "kernel-package",
        report.say,
        name=kernel_facts.name,
        version=kernel_facts.version,
        build=kernel_facts.build,
        subdir=kernel_facts.subdir,
    )
    src = unpack_sdist(sdist, work / "sdist")
    started = time.monotonic()
    command = [
        str(python),
        str(paths.recipe_dir() / FLASH_ATTN.build_script),
        "--kernel-library",
        str(package.library),
        *target_args,
        "--source-dir",
        str(src),
        "--build-dir",
        str(work / "build"),
        "--wheel-dir",
        str(work / "raw"),
        "--archs",
        cell.cuda_archs,
        "--cxx11-abi",
        str(cell.cxx11_abi),
        "--max-jobs",
        "1",
        "--checker-path",
        str(paths.repo_root() / "scripts"),
    ]
    code = run_logged(command, glue_env(tools, cuda_home) | target_env, log, report, title, GLUE_TIMEOUT_S)
    steps["glue"] = time.monotonic() - started
    raws = sorted((work / "raw").glob("*.whl"))
    if code != 0 or len(raws) != 1:
        raise FaforgeError(
            f"{cell.id}: {FLASH_ATTN.build_script} failed (exit {code})"
            if code
            else f"{cell.id}: {FLASH_ATTN.build_script} wrote {len(raws)} wheels, not one",
            exit_code=EXIT_PROBLEMS,
            hint=f"see the log {log.name}",
        )
    started = time.monotonic()
    requirement = runtime_range_of_kernel_wheel(cell.cuda, requires_dist_of(torch_metadata(torch_site)))
    original = read_info(package.library)
    was = {"rpath": list(original.rpath), "runpath": list(original.runpath)}
    kernel_wheel = pack_kernel_wheel(
        package,
        runtime_requirement=requirement,
        out_dir=dist,
        work=work / "kernel-wheel",
        say=report.say,
    )
    report.say(
        f"  {title}: kernel wheel {kernel_wheel.path.name}: the "
        "kernel package's library, byte for byte but for its RUNPATH "
        f"(RPATH {':'.join(original.rpath) or '-'} -> RUNPATH "
        f"{':'.join(kernel_wheel.runpath)}, patchelf); no kernel TU compiled for pip"
    )
    glue = repack_glue_wheel(
        raws[0],
        cell=GlueCell(
            torch=cell.torch_minor,
            cuda=cell.cuda,
            cxx11_abi=cell.cxx11_abi,
            python=cell.python,
            build_tag=build.build_string,
        ),
        kernel_wheel=kernel_wheel.path,
        out_dir=dist,
        work=work / "glue-wheel",
        say=report.say,
    )
    steps["wheels"] = time.monotonic() - started
    expected = (build.glue_wheel(glue.verdict.tag), build.kernel_wheel(kernel_wheel.verdict.tag))
    if (glue.path.name, kernel_wheel.path.name) != expected:
        raise FaforgeError(
            f"{cell.id}: the wheels are {glue.path.name} and {kernel_wheel.path.name}, the matrix names them "
            f"{expected[0]} and {expected[1]}",
            exit_code=EXIT_PROBLEMS,
            hint="faforge.matrix.pip_builds and faforge.pipwheel disagree: a bug to report",
        )
    return {
        "glue": wheel_json(glue),
        "kernel": wheel_json(kernel_wheel, was),
        "raw_wheel": raws[0].name,
        "kernel_package": {"path": str(kernel), "filename": kernel.name, "from": kernel_from},
        "torch": torch_version,
        "python": str(where.cross.python if where.cross else python),
        "cuda_home": str(cuda_home),
        "steps_s": {k: round(v, 1) for k, v in steps.items()},
    }


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
        except (FaforgeError, clean_env.Unavailable) as exc:
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
