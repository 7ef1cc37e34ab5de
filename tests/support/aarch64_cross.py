"""What a linux-aarch64 cross build needs on an x86_64 machine that is not a conda world (the
documented fallback): PyPI's aarch64 torch with its dependencies, and a CUDA home with an sbsa-linux target tree.

* The torch: `pip install --target` of the cell's torch for manylinux_2_28/2_18/2_17 aarch64 (pip does not
  widen one --platform to older manylinux tags, and nvidia-nccl is tagged manylinux_2_18), cached.
* The CUDA home: this machine's toolkit (x86_64 nvcc 13.0, whose device code does not depend on the host)
  with a targets/sbsa-linux tree made of PyPI's aarch64 nvidia-cuda-runtime wheel (nvidia/cu13: include,
  libcudart.so.13, libcudadevrt.a, libcudart_static.a; the torch above brings it) and the toolkit's
  arch-independent headers that wheel lacks (crt/, cccl/: declared stand-in). nvcc finds the folder
  above its own binary as TOP, so bin/nvcc is a copy and everything else a link into the toolkit.
* The cross builds of the tiny flash-attn-shaped sdist (tests/recipe): the kernel library by the build backend
  (build_flash_attn.py --kernels-only, nvcc -ccbin aarch64-linux-gnu-g++ -target-dir sbsa-linux), shared by the
  conda fallback test (tests/backend/test_cross_aarch64_real.py) and the pip cell; the conda fallback's glue by
  aarch64-linux-gnu-g++ alone against the aarch64 torch's and Debian's arm64 Python's headers (a stand-in for the
  recipe's build under conda's cross-python); and the pip cell's `faforge build` (cross_pip_build: the backend's
  own glue step with --torch-site), shared by tests/release/test_build_pip_cross_real.py and
  tests/pipworld/test_aarch64_cell.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from faforge import paths
from faforge.channel.local import PackageSpec, assemble
from faforge.family import FLASH_ATTN
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.debian_toolchains import Arm64Python, DebianUnavailable, arm64_plain_python
from tests.support.tiers import slow_work

# Every glibc from torch's manylinux_2_28 down: pip takes an explicit --platform literally, and NVIDIA's
# wheels pick their own floor (nvidia-cudnn-cu13 9.19.0.56, which aarch64 torch 2.11.0 pins, is
# manylinux_2_27_aarch64 only: with 2_28/2_18/2_17 listed, pip found no version and the cross test skipped).
PLATFORMS = (*(f"manylinux_2_{minor}_aarch64" for minor in range(28, 16, -1)), "manylinux2014_aarch64")


class CrossUnavailable(Exception):
    """Not cached and cannot be made here (no network, no toolkit); tests skip with this text."""


def arm64_torch_site(torch: str = "2.11.0", python: str = "3.11") -> Path:
    """site-packages holding PyPI's aarch64 torch==`torch` for CPython `python` and its dependencies."""
    slow_work("PyPI's aarch64 torch (tests/support/aarch64_cross.py)")
    folder = cache_dir("arm64-torch") / f"torch-{torch}-py{python}"
    site, done = folder / "site", folder / "FETCH.json"
    if done.is_file():
        return site
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return site
        started = time.monotonic()
        # torch alone, then its requirements with their markers read for aarch64 Linux: pip evaluates markers
        # for this x86_64 machine even under --platform, so torch 2.8.0's `triton==3.4.0; platform_machine ==
        # "x86_64"` was asked for, and no aarch64 build of it exists.
        _pip_target(site, python, [f"torch=={torch}", "--no-deps"], f"the aarch64 torch {torch}")
        requirements = aarch64_requirements(next(site.glob(f"torch-{torch}*.dist-info")) / "METADATA", python)
        if requirements:
            _pip_target(site, python, requirements, f"the dependencies of the aarch64 torch {torch}")
        done.write_text(json.dumps({"seconds": round(time.monotonic() - started, 1)}) + "\n")
    return site


def aarch64_requirements(metadata: Path, python: str) -> list[str]:
    """The Requires-Dist lines of a wheel's METADATA that apply on aarch64 Linux CPython `python`, markers dropped."""
    environment = {
        "platform_machine": "aarch64",
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "extra": "",
    }
    wanted = []
    for line in metadata.read_text().splitlines():
        if line.startswith("Requires-Dist:"):
            requirement = Requirement(line.partition(":")[2].strip())
            if requirement.marker is None or requirement.marker.evaluate(environment):
                requirement.marker = None
                wanted.append(str(requirement))
    return wanted


def _pip_target(site: Path, python: str, requirements: list[str], what: str) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--target",
            str(site),
            "--only-binary=:all:",
            "--python-version",
            python,
            *platforms,
            *requirements,
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        shutil.rmtree(site, ignore_errors=True)
        raise CrossUnavailable(f"pip could not install {what}: {result.stderr.strip()[-300:]}")


def sbsa_cuda_home(toolkit: Path, cu13: Path) -> Path:
    """`toolkit` with a targets/sbsa-linux tree from `cu13` (the aarch64 wheel's nvidia/cu13 folder)."""
    slow_work("the sbsa CUDA overlay (tests/support/aarch64_cross.py)")
    home = cache_dir("cuda-sbsa-overlay") / toolkit.resolve().name
    if (home / "bin/nvcc").is_file():
        return home
    staging = home.with_name(f"{home.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "bin").mkdir(parents=True)
    for entry in (toolkit / "bin").iterdir():
        if entry.name != "nvcc":
            (staging / "bin" / entry.name).symlink_to(entry.resolve())
    shutil.copy2((toolkit / "bin/nvcc").resolve(), staging / "bin/nvcc")
    for entry in toolkit.iterdir():
        if entry.name not in ("bin", "targets"):
            (staging / entry.name).symlink_to(entry.resolve())
    (staging / "targets").mkdir()
    for target in (toolkit / "targets").iterdir():
        (staging / "targets" / target.name).symlink_to(target.resolve())
    sbsa = staging / "targets/sbsa-linux"
    (sbsa / "include").mkdir(parents=True)
    for header in (cu13 / "include").iterdir():
        (sbsa / "include" / header.name).symlink_to(header)
    # What the runtime wheel lacks (crt/, cccl/, ... conda-forge's cuda-crt-dev_linux-aarch64 and
    # cuda-cccl_linux-aarch64) from the toolkit's own target: arch-independent headers, a declared stand-in.
    for header in (toolkit / "targets/x86_64-linux/include").iterdir():
        if not (sbsa / "include" / header.name).exists():
            (sbsa / "include" / header.name).symlink_to(header.resolve())
    (sbsa / "lib").mkdir()
    for name in ("libcudart.so.13", "libcudadevrt.a", "libcudart_static.a"):
        if not (cu13 / "lib" / name).is_file():
            raise CrossUnavailable(f"{cu13}/lib has no {name}")
        (sbsa / "lib" / name).symlink_to(cu13 / "lib" / name)
    (sbsa / "lib/libcudart.so").symlink_to("libcudart.so.13")
    try:
        staging.rename(home)
    except OSError:
        shutil.rmtree(staging)
    return home


# ------------------------------------------------------------------------------------------ the cross builds

CXX = "aarch64-linux-gnu-g++"
BUILD_SCRIPT = paths.recipe_dir() / "build_flash_attn.py"


@dataclass(frozen=True)
class CrossToolchain:
    """What cross-building the tiny sdist for linux-aarch64 (CPython 3.11) needs on this machine."""

    cuda_home: Path  # this machine's toolkit with a targets/sbsa-linux tree (sbsa_cuda_home)
    torch_site: Path  # PyPI's aarch64 torch with its dependencies (arm64_torch_site)
    python: Arm64Python  # Debian's arm64 python3.11: its headers, and the interpreter under qemu
    ninja_dir: Path  # the folder of a ninja the backend runs


def cross_toolchain(torch: str = "2.11.0") -> CrossToolchain:
    """The cross toolchain against PyPI's aarch64 torch==`torch` (cp311); CrossUnavailable naming what is missing."""
    slow_work("the aarch64 cross toolchain (tests/support/aarch64_cross.py)")
    if platform.machine() != "x86_64" or not shutil.which(CXX):
        raise CrossUnavailable(f"needs an x86_64 machine with {CXX} (Debian g++-aarch64-linux-gnu)")
    ninja = shutil.which("ninja") or str(cache_dir("venvs") / "build-tools-py3.11/bin/ninja")
    if not Path(ninja).is_file():
        raise CrossUnavailable("ninja is not on PATH (pip install ninja)")
    try:
        toolkit = cuda_home()
        site = arm64_torch_site(torch, "3.11")
        home = sbsa_cuda_home(toolkit, site / "nvidia/cu13")
        python = arm64_plain_python()
    except (NoCudaToolkit, DebianUnavailable) as exc:
        raise CrossUnavailable(str(exc)) from None
    return CrossToolchain(home, site, python, Path(ninja).parent)


def cross_kernel_library(
    tools: CrossToolchain, src: Path, build_dir: Path, lib_dir: Path, *, archs: str, philox_offset_bits: int = 64
) -> subprocess.CompletedProcess:
    """The backend cross-builds the sdist's kernel library into lib_dir/libflash_attn_kernels.so (target_platform
    linux-aarch64, CXX the cross g++, nvcc 13.0 with -ccbin and -target-dir sbsa-linux); the run, to assert on."""
    env = dict(
        os.environ,
        target_platform="linux-aarch64",
        build_platform="linux-64",
        CXX=CXX,
        CUDA_HOME=str(tools.cuda_home),
        PATH=f"{tools.ninja_dir}:{os.environ['PATH']}",
    )
    return subprocess.run(
        [
            sys.executable,
            str(BUILD_SCRIPT),
            "--kernels-only",
            "--philox-offset-bits",
            str(philox_offset_bits),
            "--source-dir",
            str(src),
            "--build-dir",
            str(build_dir),
            "--install-lib-dir",
            str(lib_dir),
            "--archs",
            archs,
            "--max-jobs",
            "1",
            "--checker-path",
            str(paths.repo_root() / "scripts"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        check=False,
    )


def cross_glue(tools: CrossToolchain, src: Path, kernel_lib_dir: Path, extension: Path, *, rpath: str | None) -> Path:
    """flash_api.cpp cross-compiled into `extension` (flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so), C++ ABI 1,
    linked against the aarch64 torch and the kernel library in kernel_lib_dir by its SONAME; `rpath` its search path, or
    none."""
    torch_dir = tools.torch_site / "torch"
    extension.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            CXX,
            "-shared",
            "-fPIC",
            "-O1",
            "-std=c++17",
            "-D_GLIBCXX_USE_CXX11_ABI=1",
            "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda",
            "-DTORCH_API_INCLUDE_EXTENSION_H",
            f"-I{torch_dir / 'include'}",
            f"-I{torch_dir / 'include/torch/csrc/api/include'}",
            f"-I{tools.python.include}",
            f"-I{tools.python.python.parents[1] / 'include'}",
            f"-I{src / 'csrc/flash_attn/src'}",
            f"-I{tools.cuda_home / 'targets/sbsa-linux/include'}",
            str(src / "csrc/flash_attn/flash_api.cpp"),
            "-o",
            str(extension),
            f"-L{torch_dir / 'lib'}",
            "-lc10",
            "-ltorch",
            "-ltorch_cpu",
            "-ltorch_python",
            f"-L{kernel_lib_dir}",
            "-lflash_attn_kernels",
            *([f"-Wl,-rpath,{rpath}"] if rpath else []),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return extension


# ------------------------------------------------------------------------------------------ the pip cell's build


@dataclass(frozen=True)
class CrossPipBuild:
    """`faforge build PIP_CELL --json` of a linux-aarch64 pip cell, from the tiny sdist and its kernel package."""

    result: subprocess.CompletedProcess
    kernel_package: Path  # the conda kernel package of the cell's key (cross-built library, assembled)
    out: Path  # --output-dir
    seconds: dict  # kernel package (cross) and faforge build, wall seconds

    def report(self) -> dict:
        assert self.result.returncode == 0, self.result.stdout[-3000:] + self.result.stderr[-5000:]
        return json.loads(self.result.stdout)


# (sdist, cell id) -> CrossPipBuild: one build per test session, shared by the tests that read it
_PIP_BUILDS: dict = {}


def cross_kernel_package(tools: CrossToolchain, src: Path, work: Path, build) -> Path:
    """The kernel package of `build`'s kernel key (a faforge.matrix.pip_builds.PipBuild) for linux-aarch64: the library
    cross-built by the backend for its arch list and Philox layout, packed under the matrix's exact build string
    (faforge.channel.local.assemble: the documented fallback, standing in for rattler-build's linux-aarch64 cross
    build)."""
    cell = build.cell
    built = cross_kernel_library(
        tools, src, work / "build", work / "lib", archs=cell.cuda_archs, philox_offset_bits=cell.philox_offset_bits
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    return assemble(
        PackageSpec(
            FLASH_ATTN.kernel_package,
            build.version,
            build.kernel_build,
            cell.platform,
            files={f"lib/{FLASH_ATTN.kernel_soname}": (work / "lib" / FLASH_ATTN.kernel_soname).read_bytes()},
        ),
        work / "channel",
    )


def cross_pip_build(tools: CrossToolchain, sdist: Path, work: Path, build, env: dict) -> CrossPipBuild:
    """`faforge build <the cell> --source SDIST --kernel-package K --torch-site <the aarch64 torch> --target-python
    <Debian's arm64 python3.11> --cuda-home <the sbsa overlay> --json`, K made by cross_kernel_package; once per
    session."""
    key = (str(sdist), build.cell.id)
    if key in _PIP_BUILDS:
        return _PIP_BUILDS[key]
    with tarfile.open(sdist) as tar:
        tar.extractall(work / "sdist", filter="data")
    [src] = (work / "sdist").iterdir()
    started = time.monotonic()
    package = cross_kernel_package(tools, src, work / "kernels", build)
    kernels_s = time.monotonic() - started
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "build",
            build.cell.id,
            "--source",
            str(sdist),
            "--kernel-package",
            str(package),
            "--output-dir",
            str(work / "out"),
            "--torch-site",
            str(tools.torch_site),
            "--target-python",
            str(tools.python.python),
            "--cuda-home",
            str(tools.cuda_home),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
        env={**os.environ, "PATH": f"{tools.ninja_dir}:{os.environ['PATH']}", **env},
    )
    built = CrossPipBuild(
        result,
        package,
        work / "out",
        {"kernel package (cross)": kernels_s, "faforge build": time.monotonic() - started},
    )
    _PIP_BUILDS[key] = built
    return built
