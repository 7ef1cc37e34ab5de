"""Kernel packages: `libflash-attn-kernels`, one per (platform, CUDA minor, arch list, Philox layout),
shared by every cell of that key across torch minors and both C++ ABIs (the split build).

The 72 kernel TUs are compiled against the torch shim (scripts/faforge/kernels/torch_shim/), so
nothing in them depends on the torch minor, the C++ ABI or python, except the layout of
at::PhiloxCudaState inside the params structs the glue passes: its offset_intragraph_ is uint32_t up
to torch 2.9 and uint64_t from 2.10 (pytorch/pytorch#164515; variants/kernel-abi.yaml), so the library
is built for one width (build_flash_attn.py --philox-offset-bits) and that width is part of the key.
Each cell's flash-attn holds only flash_api.cpp and pins its kernel build exactly. This module is
the one place that derives a cell's kernel key and the kernel package's name, version and
build-string prefix; `faforge matrix`, `plan`, `bench-build`, `publish` and `doctor` all use it. The
full build string, hash included, is never derived here: only rattler-build's render knows the hash,
so it is read from the pin in the cells' rendered run requirements (KernelPackage.exact_build).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.errors import DataError, FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels.cachekey import archs_tag

if TYPE_CHECKING:
    from faforge.matrix.cells import Cell, PipCell
    from faforge.matrix.render import RenderedCell

# The names every layer above takes from here (faforge.family spells them).
KERNEL_PACKAGE = FLASH_ATTN.kernel_package
KERNEL_LIBRARY = FLASH_ATTN.kernel_library
FLASH_ATTN_PACKAGE = FLASH_ATTN.package


@dataclass(frozen=True, order=True)
class KernelKey:
    """What the kernel objects depend on: the target platform, nvcc's CUDA minor, the arch list, and the
    width of PhiloxCudaState's offset_intragraph_ that the glue of the cell's torch passes (32 or 64)."""

    platform: str
    cuda: str
    cuda_archs: str
    philox_offset_bits: int

    @property
    def id(self) -> str:
        """e.g. 'linux-64/cu130/sm80_90_100_120ptx/philox64': logs, job names, artifact names."""
        return (
            f"{self.platform}/cu{self.cuda.replace('.', '')}/sm{archs_tag(self.cuda_archs)}"
            f"/philox{self.philox_offset_bits}"
        )

    @property
    def slug(self) -> str:
        return "kernels-" + self.id.replace("/", "-")

    @property
    def build_string_prefix(self) -> str:
        """The recipe's kernel build string up to its hash: cu130_sm80_90_100_120ptx_philox64_h (the recipe
        writes cu${{ cuda_tag }}_sm${{ archs_tag }}_philox${{ philox_offset_bits }}_h${{ hash }}_N)."""
        return f"cu{self.cuda.replace('.', '')}_sm{archs_tag(self.cuda_archs)}_philox{self.philox_offset_bits}_h"


def kernel_key(cell: Cell) -> KernelKey:
    return KernelKey(
        platform=cell.platform, cuda=cell.cuda, cuda_archs=cell.cuda_archs, philox_offset_bits=cell.philox_offset_bits
    )


@dataclass(frozen=True)
class KernelPackage:
    key: KernelKey
    version: str
    build_number: int
    world: str  # the torch world whose channels build it (see kernel_packages)
    cell_ids: tuple[str, ...]
    name: str = KERNEL_PACKAGE

    def build_string_matches(self, build_string: str) -> bool:
        """Whether a rendered or published build string is this package's: prefix, 7-hex hash, number."""
        pattern = re.escape(self.key.build_string_prefix) + r"[0-9a-f]{7}_" + str(self.build_number)
        return re.fullmatch(pattern, build_string) is not None

    def pins(self, rendered: list[RenderedCell]) -> set[KernelPin]:
        """The kernel builds that this package's cells among `rendered` pin exactly (their rendered run
        requirements): one for the split recipe, none for a recipe whose flash-attn carries its kernels."""
        return {pin for r in rendered if r.cell.id in self.cell_ids and (pin := kernel_pin(r.run_requirements))}

    def exact_build(self, rendered: list[RenderedCell]) -> KernelPin | None:
        """The one kernel build this package's cells pin (what CI builds, hash included), or None
        when none of them pins one. Cells that pin different builds, or a build that is not this package's,
        are an error: CI would build one kernel file per distinct pin, not one per kernel key."""
        pins = self.pins(rendered)
        if len(pins) > 1:
            raise FaforgeError(
                f"the cells of kernel package {self.key.id} pin {len(pins)} "
                f"different builds: {', '.join(sorted(map(str, pins)))}",
                hint=f"the recipe's {self.name} output reads a variant "
                "value that differs among the cells of one kernel key "
                "(a context entry computed from torch_version or python, say); it may read only CUDA, archs, the "
                "Philox width, the compilers and kernel_inputs",
            )
        if not pins:
            return None
        pin = pins.pop()
        if pin.version != self.version or not self.build_string_matches(pin.build):
            raise FaforgeError(
                f"the cells of kernel package {self.key.id} pin {pin}, not {self.name} {self.version} "
                f"{self.key.build_string_prefix}<hash>_{self.build_number}",
                hint="the recipe's kernel output must take the matrix's "
                f"{FLASH_ATTN.package} version, build number and the build "
                "string cu<cuda>_sm<archs>_philox<bits>_h<hash>_<number>; run `faforge generate` if variants/ is stale",
            )
        return pin

    def as_json(self, pin: KernelPin | None = None) -> dict:
        """`pin`: the exact build its cells pin (exact_build); its build string, file and spec are null without one."""
        return {
            "id": self.key.id,
            "name": self.name,
            "version": self.version,
            "build_string_prefix": self.key.build_string_prefix,
            "build_string": pin.build if pin else None,
            "file": pin.filename() if pin else None,
            "spec": pin.spec if pin else None,
            "build_number": self.build_number,
            "platform": self.key.platform,
            "cuda": self.key.cuda,
            "cuda_archs": self.key.cuda_archs,
            "philox_offset_bits": self.key.philox_offset_bits,
            "torch_source": self.world,
            "cells": list(self.cell_ids),
        }


def kernel_packages(
    cells: Iterable[Cell], *, version: str, build_number: int, releases_path: Path | None = None
) -> list[KernelPackage]:
    """One kernel package per kernel key of `cells`, each listing the cells that depend on it.

    A key may not occur in two torch worlds. Each world builds with its own channels (conda-forge
    alone, or pytorch + nvidia + conda-forge: variants/releases.yaml), so its kernel build would take
    cudart and the C++ runtime from other packages, yet the kernel output's hash covers only the
    variant keys it uses (CUDA, archs, Philox width, compilers), not the channels: two worlds would build two
    different files under one name, version and build string, and a channel can hold only one of them.
    """
    by_key: dict[KernelKey, list] = {}
    for cell in cells:
        by_key.setdefault(kernel_key(cell), []).append(cell)
    out = []
    for key, users in sorted(by_key.items()):
        worlds = sorted({c.world for c in users})
        if len(worlds) > 1:
            raise DataError(
                releases_path or "variants/releases.yaml",
                "releases",
                f"the kernel key {key.id} occurs in the torch worlds {' and '.join(worlds)}: both would build "
                f"{KERNEL_PACKAGE} {version} {key.build_string_prefix}<hash>_{build_number}, from different channels",
                hint="build that CUDA in one world only (variants/matrix.yaml `exclude:` the other world's cells), "
                "or give the kernel output a variant key that tells the worlds apart",
            )
        out.append(
            KernelPackage(
                key=key,
                version=version,
                build_number=build_number,
                world=worlds[0],
                cell_ids=tuple(c.id for c in users),
            )
        )
    return out


def pip_kernel_packages(
    conda: list[KernelPackage], pip_cells: Iterable[PipCell], *, version: str, build_number: int
) -> list[KernelPackage]:
    """The kernel packages the pip cells need and no conda cell has, one per kernel key, each
    built in its pip world (its channels: variants/releases.yaml). A pip cell whose key a conda cell has
    links that conda package itself, the very same file (all_kernel_packages): its render is the same,
    because the policy gives the pip world the conda world's compilers for that CUDA."""
    have = {k.key for k in conda}
    by_key: dict[KernelKey, list] = {}
    for cell in pip_cells:
        if kernel_key(cell) not in have:
            by_key.setdefault(kernel_key(cell), []).append(cell)
    return [
        KernelPackage(
            key=key,
            version=version,
            build_number=build_number,
            world=sorted({c.world for c in users})[0],
            cell_ids=tuple(c.id for c in users),
        )
        for key, users in sorted(by_key.items())
    ]


def all_kernel_packages(
    conda: list[KernelPackage], pip_only: list[KernelPackage], pip_cells: Iterable[PipCell]
) -> list[KernelPackage]:
    """Every kernel package once, with the cells of every world that pin it: the conda packages with the pip
    cells of their key added, then those only pip cells need."""
    pip_ids: dict[KernelKey, list[str]] = {}
    for cell in pip_cells:
        pip_ids.setdefault(kernel_key(cell), []).append(cell.id)
    shared = [replace(k, cell_ids=k.cell_ids + tuple(pip_ids.get(k.key, ()))) for k in conda]
    return sorted([*shared, *(k for k in pip_only if k.key not in {s.key for s in shared})], key=lambda k: k.key)


# A kernel build string as KernelKey.build_string_prefix and the recipe write it.
KERNEL_BUILD = re.compile(
    r"^cu(?P<cuda>\d+)_sm(?P<archs>[0-9a-z_]+?)_philox(?P<philox>32|64)_h[0-9a-f]+_(?P<number>\d+)$"
)
# (group, words, tag prefix, note): what a kernel build string's parts mean.
_BUILD_PARTS = (
    ("cuda", "CUDA", "cu", ""),
    ("archs", "arch list", "sm", ""),
    (
        "philox",
        "Philox layout",
        "philox",
        " (the width of at::PhiloxCudaState's offset_intragraph_: 32 "
        "bits up to torch 2.9, 64 from 2.10, pytorch/pytorch#164515)",
    ),
)


def kernel_build_differences(required: str, installed: str) -> list[str]:
    """What sets an installed kernel build apart from the required one, in words ("CUDA cu129, not cu130");
    empty when the two build strings agree on CUDA, archs and layout or either is not a kernel build string."""
    want, have = KERNEL_BUILD.match(required), KERNEL_BUILD.match(installed)
    if not (want and have):
        return []
    return [
        f"{words} {tag}{have[part]}, not {tag}{want[part]}{note}"
        for part, words, tag, note in _BUILD_PARTS
        if want[part] != have[part]
    ]


# rattler-build writes pin_subpackage('libflash-attn-kernels', exact=True) as `NAME ==VERSION BUILD`
# (older conda-build: `NAME VERSION BUILD`); both name one build.
KERNEL_PIN = re.compile(
    rf"^{re.escape(KERNEL_PACKAGE)}\s+(?:==)?\s*(?P<version>[^\s,|*<>=!]+)\s+(?P<build>[A-Za-z0-9_.]+)$"
)


@dataclass(frozen=True)
class KernelPin:
    """The one kernel build a flash-attn package requires."""

    version: str
    build: str

    def __str__(self) -> str:
        return f"{KERNEL_PACKAGE} {self.version} {self.build}"

    @property
    def spec(self) -> str:
        """The match spec as a flash-attn's run requirements carry it (rattler-build's exact pin_subpackage)."""
        return f"{KERNEL_PACKAGE} =={self.version} {self.build}"

    def filename(self) -> str:
        return f"{KERNEL_PACKAGE}-{self.version}-{self.build}.conda"


def kernel_pin(depends: Iterable[object]) -> KernelPin | None:
    """The exact kernel pin among a package's run requirements; None for a flash-attn that carries
    its kernels itself (built before the split, or by a local wheel build)."""
    for spec in depends:
        match = KERNEL_PIN.match(str(spec).strip())
        if match:
            return KernelPin(version=match["version"], build=match["build"])
    return None
