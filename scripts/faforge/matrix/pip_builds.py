"""What the matrix knows of each pip cell's wheels: its kernel package and exact kernel build, the
glue's identity build string, and the names, versions and requirements of the two wheels.

The kernel wheel is the kernel package's library repacked (faforge.pipwheel), so its version is the package's:
the flash-attn version with the conda build string, less its build number, as the local label
(2.8.3.post2+cu130.sm80.90.100.120ptx.philox64.ha5d2e90), the build number as its wheel build tag. The glue
wheel's version names the torch minor, CUDA and ABI (2.8.3.post2+torch2.11.cu130.abi1), its build tag the
build number and the identity hash (0h1a2b3c4, faforge.matrix.inputs.glue_wheel_hash). The platform tag is
decided at build time from the binary (auditwheel's policy), so the matrix gives the file name up to it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from faforge.abi.platforms import PLATFORM_MACHINE as WHEEL_ARCH
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.matrix.cells import PipCell
from faforge.matrix.inputs import glue_wheel_hash
from faforge.matrix.kernels import KernelPackage, KernelPin, kernel_key
from faforge.matrix.render_cache import cached_pip_kernels, cached_render_cells
from faforge.matrix.variants import variant_config_path, variant_file_digests
from faforge.wheelnames import build_tag, glue_label, kernel_label, torch_requirement

if TYPE_CHECKING:
    from faforge.matrix import Matrix

# PEP 427: a distribution name in a wheel file name has its `-` as `_`.
GLUE_DIST = FLASH_ATTN.package
KERNEL_DIST = FLASH_ATTN.kernel_package


def wheel_name_part(name: str) -> str:
    return name.replace("-", "_")


def kernel_wheel_version(version: str, kernel_build: str) -> str:
    """'2.8.3.post2', 'cu130_sm80_90_100_120ptx_philox64_ha5d2e90_0' ->
    '2.8.3.post2+cu130.sm80.90.100.120ptx.philox64.ha5d2e90'."""
    return f"{version}+{kernel_label(kernel_build)[0]}"


@dataclass(frozen=True)
class PipBuild:
    """One pip cell with everything the matrix decides for its wheels."""

    cell: PipCell
    kernel: KernelPackage  # the conda world's package of its kernel key, or the one its pip world brings
    kernel_build: str  # that package's exact build string (rattler-build's render: its hash)
    build_string: str  # the glue's identity, as a conda flash-attn's: py312_torch2_11_cu130_cxx11abi1_h1a2b3c4_0
    version: str  # flash-attn's

    @property
    def kernel_shared(self) -> bool:
        """Whether a conda world's cells pin the same kernel package (built once, for both)."""
        return self.kernel.world != self.cell.world

    @property
    def glue_version(self) -> str:
        c = self.cell
        return f"{self.version}+{glue_label(c.torch_minor, c.cuda_tag, c.cxx11_abi)}"

    @property
    def glue_build_tag(self) -> str:
        return build_tag(self.build_string)

    @property
    def kernel_wheel_version(self) -> str:
        return kernel_wheel_version(self.version, self.kernel_build)

    @property
    def kernel_wheel_build_tag(self) -> str:
        return kernel_label(self.kernel_build)[1]

    @property
    def requires_dist(self) -> tuple[str, ...]:
        c = self.cell
        return (torch_requirement(c.torch_minor), f"{KERNEL_DIST}=={self.kernel_wheel_version}", "einops")

    def glue_wheel(self, platform_tag: str | None = None) -> str:
        """The glue wheel's file name; without the platform tag (decided from the binary at build time) a
        pattern with `manylinux_*` in its place."""
        c = self.cell
        tag = platform_tag or f"manylinux_*_{WHEEL_ARCH[c.platform]}"
        return (
            f"{wheel_name_part(GLUE_DIST)}-{self.glue_version}-{self.glue_build_tag}"
            f"-{c.python_wheel_tag}-{c.python_wheel_tag}-{tag}.whl"
        )

    def glue_wheel_pattern(self) -> re.Pattern:
        """The glue wheel's file name whatever its build tag and manylinux level (decided at build time): what
        an index must list for the cell's pip line to install (the page's `published`, doctor's index check)."""
        c = self.cell
        return re.compile(
            rf"{re.escape(wheel_name_part(GLUE_DIST))}-{re.escape(self.glue_version)}(?:-[0-9][^-]*)?-"
            rf"{c.python_wheel_tag}-{c.python_wheel_tag}-(?:[a-z0-9_]+\.)*manylinux_[0-9]+_[0-9]+_{WHEEL_ARCH[c.platform]}"
            rf"(?:\.[a-z0-9_]+)*\.whl"
        )

    def kernel_wheel(self, platform_tag: str | None = None) -> str:
        tag = platform_tag or f"manylinux_*_{WHEEL_ARCH[self.cell.platform]}"
        return (
            f"{wheel_name_part(KERNEL_DIST)}-{self.kernel_wheel_version}-{self.kernel_wheel_build_tag}"
            f"-py3-none-{tag}.whl"
        )

    def to_json(self) -> dict:
        c, k = self.cell, self.kernel
        return {
            "id": c.id,
            "platform": c.platform,
            "python": c.python,
            "torch": c.torch,
            "torch_minor": c.torch_minor,
            "cuda": c.cuda,
            "cxx11_abi": c.cxx11_abi,
            "torch_source": c.world,
            "torch_wheel": c.wheel,
            "torch_index": c.index,
            "cuda_archs": c.cuda_archs,
            "philox_offset_bits": c.philox_offset_bits,
            "build_string": self.build_string,
            "index_name": c.index_name,
            "requires_python": c.requires_python,
            "requires_dist": list(self.requires_dist),
            "glue_wheel": {
                "name": GLUE_DIST,
                "version": self.glue_version,
                "build_tag": self.glue_build_tag,
                "python_tag": c.python_wheel_tag,
                "abi_tag": c.python_wheel_tag,
                "platform_tag": None,
                "file_pattern": self.glue_wheel(),
            },
            "kernel_wheel": {
                "name": KERNEL_DIST,
                "version": self.kernel_wheel_version,
                "build_tag": self.kernel_wheel_build_tag,
                "file_pattern": self.kernel_wheel(),
            },
            "kernel_package": {
                "id": k.key.id,
                "name": k.name,
                "version": k.version,
                "build_string_prefix": k.key.build_string_prefix,
                "build_string": self.kernel_build,
                "torch_source": k.world,
                "shared": self.kernel_shared,
            },
        }


def pip_kernel_pins(matrix: Matrix, cells: list[PipCell]) -> dict[str, KernelPin]:
    """{kernel key id: its exact build} for the kernel keys of `cells`: a key a conda world has is the build
    that world's cells pin (their renders); the others the pip world's own render of the kernel output. A
    shared key whose pip render differs from the conda pin is an error: it would be two packages."""
    keys = {kernel_key(c) for c in cells}
    conda = [k for k in matrix.kernels if k.key in keys]
    conda_cells = [c for c in matrix.cells if kernel_key(c) in keys and c.id in {i for k in conda for i in k.cell_ids}]
    rendered = cached_render_cells(conda_cells, matrix.recipe_path, matrix.variants_dir) if conda_cells else []
    pins = {k.key.id: pin for k in conda if (pin := k.exact_build(rendered))}
    for key_id, own in cached_pip_kernels(cells, matrix.recipe_path, matrix.variants_dir).items():
        built = KernelPin(version=str(own.recipe["package"]["version"]), build=own.build_string)
        if key_id in pins and pins[key_id] != built:
            raise_mismatch(key_id, pins[key_id], built, own.cell.world)
        pins.setdefault(key_id, built)
    return pins


def raise_mismatch(key_id: str, conda: KernelPin, pip: KernelPin, world: str) -> None:
    raise FaforgeError(
        f"kernel key {key_id}: the {world} world renders {pip}, the conda world's cells pin {conda}",
        hint=f"a kernel key must be one package: give the {world} world the conda world's compilers and sysroot "
        "for that CUDA (variants/matrix.yaml host_gcc, c_stdlib_version) and run `faforge generate`",
    )


def pip_builds(matrix: Matrix, platform: str = "all", world: str | None = None) -> list[PipBuild]:
    """Every pip cell of `platform` (or all) and `world` (or every pip world) with its wheels' identities."""
    cells = [c for c in matrix.pip_cells if platform in ("all", c.platform) and world in (None, c.world)]
    if not cells:
        return []
    pins = pip_kernel_pins(matrix, cells)
    packages = {k.key.id: k for k in matrix.all_kernels}
    digests = {
        pair: variant_file_digests(variant_config_path(matrix.variants_dir, *pair))
        for pair in {(c.platform, c.world) for c in cells}
    }
    out = []
    for c in cells:
        pin = pins[kernel_key(c).id]
        h = glue_wheel_hash(
            c.variant(),
            digests[(c.platform, c.world)],
            pin.build,
            platform=c.platform,
            version=matrix.policy.flash_attn_version,
            build_number=matrix.policy.build_number,
        )
        build_string = (
            f"{c.python_tag}_torch{c.torch_minor.replace('.', '_')}_{c.cuda_tag}_cxx11abi{c.cxx11_abi}"
            f"_h{h}_{matrix.policy.build_number}"
        )
        out.append(
            PipBuild(
                cell=c,
                kernel=packages[kernel_key(c).id],
                kernel_build=pin.build,
                build_string=build_string,
                version=matrix.policy.flash_attn_version,
            )
        )
    return out
