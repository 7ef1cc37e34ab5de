"""Build trees laid out the way rattler-build lays out one build of one variant.

A compiler cache shared by python variants only helps if it hits despite the path differences
between their builds, so a test of it must reproduce them.  rattler-build puts, side by side under
output/bld/rattler-build_<name>_<unix time>/ (see its directories.rs):
  work/                          the unpacked source ($SRC_DIR); the build script runs here
  build_env/                     the build prefix ($BUILD_PREFIX): nvcc and the host compiler
  host_env_placehold_placeh...   the host prefix ($PREFIX), padded with a placeholder whose
                                 length depends on the path above it
Packages are hardlinked into the prefixes from the package cache, and so are the files here.
The host prefix holds torch's headers under lib/pythonX.Y/site-packages, and, as with
conda-forge's cuda-cudart-dev, CUDA headers under targets/<triplet>/include; conda-forge's nvcc
searches those through $CUDA_INCLUDE_DIRS (cuda-nvcc-impl-feedstock, recipe/nvcc.profile.patch
and recipe/activate.sh), which the build_env's nvcc.profile here reproduces.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels.tus import KERNEL_DIR

PLACEHOLDER = "_placehold"
CUTLASS_INCLUDE = "csrc/cutlass/include"


def placeholder_name(length: int) -> str:
    """host_env_placehold_placehold... cut to `length` characters, as rattler-build pads $PREFIX."""
    if length < len("host_env"):
        raise FaforgeError(f"placeholder length {length} is shorter than 'host_env'")
    reps = length // len(PLACEHOLDER) + 1
    return ("host_env" + PLACEHOLDER * reps)[:length]


@dataclass(frozen=True)
class Layout:
    root: Path
    host_env: Path
    python_version: str
    triplet: str

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def build_env(self) -> Path:
        return self.root / "build_env"

    @property
    def nvcc(self) -> Path:
        return self.build_env / "bin" / "nvcc"

    @property
    def site_packages(self) -> Path:
        return self.host_env / "lib" / f"python{self.python_version}" / "site-packages"

    @property
    def torch_include(self) -> Path:
        return self.site_packages / "torch" / "include"

    @property
    def python_include(self) -> Path:
        return self.host_env / "include" / f"python{self.python_version}"

    @property
    def build_dir(self) -> Path:
        return self.work / "build"

    @property
    def temp_dir(self) -> Path:
        """setuptools' build_temp, where torch's ninja file runs nvcc."""
        return self.build_dir / f"temp.linux-{platform.machine()}-cpython-{self.python_version.replace('.', '')}"

    def flash_attn_include_dirs(self) -> list[str]:
        return [str(self.work / d) for d in FLASH_ATTN.include_dirs]

    def cuda_include_dirs_env(self) -> str:
        """$CUDA_INCLUDE_DIRS as conda-forge's cuda-nvcc activation sets it during a build."""
        return f"-I{self.host_env}/targets/{self.triplet}/include -I{self.build_env}/targets/{self.triplet}/include"


def _tree(src: Path, dst: Path, *, hardlink: bool) -> None:
    def link_or_copy(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy if hardlink else shutil.copy2)


def _conda_forge_profile(build_env: Path) -> None:
    """Append $(CUDA_INCLUDE_DIRS) to nvcc.profile's INCLUDES, as conda-forge's patch does.
    The hardlink is replaced by a new file, never written through."""
    profile = build_env / "bin" / "nvcc.profile"
    lines = profile.read_text().splitlines()
    patched = [line + " $(CUDA_INCLUDE_DIRS) $(_SPACE_)" if line.startswith("INCLUDES") else line for line in lines]
    profile.unlink()
    profile.write_text("\n".join(patched) + "\n")


@dataclass(frozen=True)
class LayoutSources:
    cuda_home: Path
    torch_include: Path
    python_include: Path
    sdist: Path


def make_layout(
    base: Path,
    *,
    build_id: str,
    placeholder_length: int,
    python_version: str,
    sources: LayoutSources,
    tus: list[str],
    triplet: str,
) -> Layout:
    root = base / "bld" / f"rattler-build_{FLASH_ATTN.package}_{build_id}"
    if root.exists():
        raise FaforgeError(f"{root} exists", hint="use a fresh --workdir for each benchmark run")
    layout = Layout(
        root=root, host_env=root / placeholder_name(placeholder_length), python_version=python_version, triplet=triplet
    )
    _tree(sources.cuda_home.resolve(), layout.build_env, hardlink=True)
    _conda_forge_profile(layout.build_env)
    _tree(sources.torch_include, layout.torch_include, hardlink=True)
    _tree(sources.python_include, layout.python_include, hardlink=True)
    cuda_headers = (sources.cuda_home / "targets" / triplet / "include").resolve()
    _tree(cuda_headers, layout.host_env / "targets" / triplet / "include", hardlink=True)
    # The sdist is copied, not linked: it may belong to a build in progress.
    _tree(sources.sdist / CUTLASS_INCLUDE, layout.work / CUTLASS_INCLUDE, hardlink=False)
    kernel_dir = layout.work / KERNEL_DIR
    kernel_dir.mkdir(parents=True)
    for path in sorted((sources.sdist / KERNEL_DIR).iterdir()):
        if path.suffix in (".h", ".cuh") or path.name in tus:
            shutil.copy2(path, kernel_dir / path.name)
    layout.temp_dir.mkdir(parents=True)
    return layout
