"""What one pip cell's build reads before it compiles anything: the CUDA toolkit, the kernel package, the sdist.

`faforge build PIP_CELL` checks them first, so a bad --cuda-home or --kernel-package fails before minutes of work:
the CUDA toolkit is --cuda-home or the build backend's (faforge.backend.toolchain.find_cuda_home), of the cell's
CUDA release; the kernel package is one given (--kernel-package, the exact build of a requested cell), one in the
output folder, one in the kernel channel, or built here as `faforge build CELL --part kernels` builds it; the
flash-attn sdist is --source or the recipe's own from PyPI, sha256-checked. Apart from the build's steps
(faforge.release.build.pip_wheels) so that the command checks its inputs with what the steps read them with.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from faforge import config, paths
from faforge.backend.errors import BuildError
from faforge.backend.toolchain import find_cuda_home, nvcc_version
from faforge.costmodel.runners import KERNELS_PART
from faforge.errors import EXIT_PROBLEMS, FaforgeError, RemoteError
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix
from faforge.matrix.kernels import KERNEL_PACKAGE, KernelPin, kernel_key
from faforge.matrix.pip_builds import PipBuild
from faforge.matrix.render import SourceOverride, recipe_file, render_kernel_output
from faforge.packagefile import sha256_of
from faforge.release.build.pip_target import CrossTarget
from faforge.release.build.steps import CellBuild, build_cell
from faforge.release.kernel_package import fetch_kernel_package
from faforge.release.package import PackageFacts
from faforge.release.reporter import Reporter
from faforge.wheelfetch import download_checked, list_files

WHEEL_DIR = "dist"


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
