"""A clean environment for one package where no conda channel is reachable: a fresh venv with the
package extracted into it, on top of the PyPI torch wheel that matches the package's cell.

The torch wheel (with its nvidia-* and other dependencies) is installed once per (torch, python)
into a cached base venv; each check then gets a brand-new venv whose site-packages holds only
the package and a .pth line pointing at the base. A conda package's files sit under
lib/pythonX.Y/site-packages exactly as in a venv, so extracting it into the venv root installs it.

A wheel "matches" when it has the cell's torch version, python, platform, CUDA and C++ ABI; the
CUDA is read from torch/version.py inside the remote wheel (a range read, no download) and
confirmed, with the ABI, from the installed torch. No such wheel means `skipped`, never `passed`.
"""

from __future__ import annotations

import contextlib
import json
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from faforge import wheelfetch
from faforge.abi.platforms import MACHINE_PLATFORM as MACHINE_SUBDIRS
from faforge.release.package import PackageFacts
from faforge.release.venv_cache import Unavailable, cached_venv, find_python
from faforge.wheelnames import cuda_runtime_dist

# The package's Python run requirements that the torch wheel does not bring, by PyPI name. A real
# build's other run requirements (libgcc, libstdcxx, cuda-cudart, python_abi, arm-variant from
# run_exports; pytorch and its pins) are C libraries or conda metadata: the torch wheel and its
# nvidia-* wheels provide what the venv needs of them, and PyPI has no package of those names.
PYPI_NAMES = {"einops": "einops"}
# Always in the base venv: the GPU gate runs faforge.gpu.run_suite, which runs pytest.
SUITE_EXTRAS = ("pytest",)
# The base venv of flash-attn's gates (its conda package's, pip_requirements; its glue wheel's and, beside the same
# torch, a stable-ABI wheel's) and of the pip build's glue: flash-attn's Python run requirement on PyPI (einops) and the
# suite's pytest, so that they all share one cached venv of a torch and Python (torch-2.14.1-py3.11+einops+pytest).
BASE_EXTRAS = tuple(sorted({*PYPI_NAMES.values(), *SUITE_EXTRAS}))
# Wheel platform tags per conda subdir.
WHEEL_PLATFORMS = {"linux-64": r"manylinux[^-]*_x86_64", "linux-aarch64": r"manylinux[^-]*_aarch64"}


@dataclass(frozen=True)
class TorchVenv:
    prefix: Path
    python: Path
    site_packages: Path
    torch: str
    cuda: str | None
    cxx11_abi: int

    @property
    def torch_lib(self) -> Path:
        return self.site_packages / "torch" / "lib"


def pip_requirements(package: PackageFacts) -> list[str]:
    """PyPI names of the package's Python run requirements (PYPI_NAMES), plus SUITE_EXTRAS."""
    names = [dep.split()[0] for dep in package.depends]
    return sorted({PYPI_NAMES[n] for n in names if n in PYPI_NAMES} | set(SUITE_EXTRAS))


def check_runnable_here(package: PackageFacts) -> None:
    here = MACHINE_SUBDIRS.get(platform.machine())
    if package.subdir != here:
        raise Unavailable(f"a {package.subdir} package cannot be imported on this {platform.machine()} machine")
    python_and_torch(package)


def python_and_torch(package: PackageFacts) -> tuple[str, str]:
    """The python and torch a flash-attn package's build string names; Unavailable when it does not name all of
    python, torch, CUDA and ABI (no torch can be matched)."""
    if package.python is None or package.torch is None or package.cuda is None or package.cxx11_abi is None:
        raise Unavailable(
            f"{package.filename}: its build string does not name python/torch/CUDA/ABI, so no torch can be matched"
        )
    return package.python, package.torch


@cache
def _torch_files() -> tuple:
    return tuple(wheelfetch.list_files("torch"))


@cache
def _remote_cuda(torch: str, python_tag: str, subdir: str) -> str | None:
    try:
        wheel = wheelfetch.pick_wheel(list(_torch_files()), torch, python_tag, WHEEL_PLATFORMS[subdir])
    except wheelfetch.FetchError as exc:
        if "no wheel for version" in exc.message:
            raise Unavailable(f"PyPI has no torch {torch} wheel for {python_tag} on {subdir}") from None
        return None
    try:
        text = wheelfetch.RemoteZip(wheel.url, wheel.size).read("torch/version.py").decode()
    except wheelfetch.FetchError:
        return None
    for line in text.splitlines():
        if line.startswith("cuda"):
            value = line.split("=", 1)[1].strip().strip("'\"")
            return None if value == "None" else value
    return None


def remote_wheel_cuda(package: PackageFacts) -> str | None:
    """CUDA of the PyPI torch wheel for this cell, read from torch/version.py inside it.

    Raises Unavailable when PyPI has no such wheel; returns None when PyPI cannot be reached
    (then the installed torch is checked instead)."""
    python, torch = python_and_torch(package)
    return _remote_cuda(torch, "cp" + python.replace(".", ""), package.subdir)


def torch_venv(
    package: PackageFacts, extra: list[str], announce: Callable[[str], None] = lambda message: None
) -> TorchVenv:
    """The cached base venv with the cell's PyPI torch (built on first use, under a lock; `announce` hears it first)."""
    python, torch = python_and_torch(package)
    return pypi_torch_venv(f"=={torch}", python, extra, announce)


def pypi_torch_venv(
    version: str,
    python: str,
    extra: list[str] | tuple[str, ...] = SUITE_EXTRAS,
    announce: Callable[[str], None] = lambda message: None,
) -> TorchVenv:
    """A cached venv of CPython `python` with PyPI's torch`version` ('==2.11.0', '==2.13.*') and `extra`."""
    name = f"torch-{version.lstrip('=')}-py{python}" + "".join(f"+{e}" for e in sorted(extra))
    prefix = cached_venv("torch-venvs", name, python, [f"torch{version}", *extra], f"PyPI torch{version}", announce)
    venv_python = prefix / "bin" / "python"
    probe = (
        "import json, torch; print(json.dumps([torch.__version__, "
        "torch.version.cuda, int(torch._C._GLIBCXX_USE_CXX11_ABI)]))"
    )
    result = subprocess.run([str(venv_python), "-c", probe], capture_output=True, text=True)
    if result.returncode != 0:
        raise Unavailable(f"torch{version} in {prefix} does not import: {result.stderr.strip().splitlines()[-1:]}")
    version, cuda, abi = json.loads(result.stdout)
    site = next((prefix / "lib").glob("python3*/site-packages"))
    return TorchVenv(prefix=prefix, python=venv_python, site_packages=site, torch=version, cuda=cuda, cxx11_abi=abi)


def matching_torch_venv(package: PackageFacts, announce: Callable[[str], None] = lambda message: None) -> TorchVenv:
    """The base venv, or Unavailable saying exactly which fact of the cell PyPI's torch does not match."""
    check_runnable_here(package)
    remote_cuda = remote_wheel_cuda(package)
    if remote_cuda is not None and remote_cuda != package.cuda:
        raise Unavailable(
            f"PyPI's torch {package.torch} is built for CUDA {remote_cuda}, the cell for CUDA {package.cuda}"
        )
    venv = torch_venv(package, pip_requirements(package), announce)
    if venv.cuda != package.cuda:
        raise Unavailable(
            f"torch {venv.torch} from PyPI is built for CUDA {venv.cuda}, the cell for CUDA {package.cuda}"
        )
    if venv.cxx11_abi != package.cxx11_abi:
        raise Unavailable(
            f"torch {venv.torch} from PyPI uses C++ ABI {venv.cxx11_abi}, the cell ABI {package.cxx11_abi}"
        )
    return venv


@dataclass(frozen=True)
class RuntimeVenv:
    """A venv holding only PyPI's CUDA runtime wheel of one CUDA minor (no torch)."""

    python: Path
    site_packages: Path
    requirement: str

    def cudart(self) -> list[Path]:
        """The shared CUDA runtime the wheel installs (nvidia/cu13/lib/ or nvidia/cuda_runtime/lib/)."""
        return sorted(p for p in self.site_packages.glob("nvidia/*/lib/libcudart.so.*") if p.is_file())


def runtime_pin_of_cuda_minor(cuda: str) -> str:
    """PyPI's CUDA runtime wheel of a CUDA minor (faforge.wheelnames.cuda_runtime_dist), that minor exactly."""
    major, minor = cuda.split(".")[:2]
    return f"{cuda_runtime_dist(cuda)}=={major}.{minor}.*"


def cuda_runtime_venv(cuda: str, announce: Callable[[str], None] = lambda message: None) -> RuntimeVenv:
    """The cached venv with PyPI's CUDA runtime of `cuda` ('13.0'), for loading a torch-free library."""
    requirement = runtime_pin_of_cuda_minor(cuda)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    prefix = cached_venv(
        "runtime-venvs", f"cuda-runtime-{cuda}", version, [requirement], f"PyPI {requirement}", announce
    )
    site = next((prefix / "lib").glob("python3*/site-packages"))
    return RuntimeVenv(python=prefix / "bin" / "python", site_packages=site, requirement=requirement)


@contextlib.contextmanager
def unpacked(*packages: PackageFacts) -> Iterator[Path]:
    """A temporary prefix with `packages` extracted into it, as conda would lay them out."""
    from rattler.package_streaming import extract  # noqa: PLC0415 (py-rattler: slow to import)

    with tempfile.TemporaryDirectory(prefix="faforge-unpacked-") as tmp:
        for package in packages:
            extract(package.path, Path(tmp))
        yield Path(tmp)


@contextlib.contextmanager
def fresh_env(package: PackageFacts, base: TorchVenv, kernel: PackageFacts | None = None) -> Iterator[Path]:
    """A new venv holding only `package` (and the kernel package it pins: its lib/ becomes the venv's
    lib/, where the glue's RUNPATH $ORIGIN/../.. reaches), with the base venv's torch visible through a .pth file."""
    from rattler.package_streaming import extract  # noqa: PLC0415 (py-rattler: slow to import)

    python, _ = python_and_torch(package)  # the torch venv `base` was matched to it, so it names them
    with tempfile.TemporaryDirectory(prefix="faforge-clean-env-") as tmp:
        prefix = Path(tmp) / "env"
        subprocess.run(
            [str(find_python(python)), "-m", "venv", "--without-pip", str(prefix)], check=True, capture_output=True
        )
        site = next((prefix / "lib").glob("python3*/site-packages"))
        (site / "_faforge_torch_venv.pth").write_text(f"{base.site_packages}\n")
        for each in (package, kernel) if kernel else (package,):
            extract(each.path, prefix)
        yield prefix / "bin" / "python"
