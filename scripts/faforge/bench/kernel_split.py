"""Before and after the kernel split (the split build): kernel compiles and channel bytes of the whole matrix,
computed from variants/build-measurements.yaml and the matrix.

Before, every flash-attn package carries its own kernels, which CI compiles once per compiler-cache key
(faforge.kernels.cachekey: platform, torch minor, CUDA, C++ ABI, arch list). After, one
libflash-attn-kernels per (platform, CUDA, arch list, Philox layout) (faforge.matrix.kernels) carries
them, and each cell's flash-attn holds only flash_api.cpp's code. The layout is the width of torch's
PhiloxCudaState::offset_intragraph_ (32 bits up to torch 2.9, 64 from 2.10: variants/kernel-abi.yaml),
so a CUDA that serves torch minors on both sides of 2.9/2.10 has two kernel packages.

Size model, from the `sizes` of the real split sm_90 build (stripped, as the packages ship it): only the
GPU code (the .nv_fatbin section) grows with the SASS arch count. kernel library(n) = kernel host code +
n x fatbin per arch, where kernel host code = kernel library(1) - fatbin; a package before = kernel
library(n) + glue; a cell's package after = glue.
Compressed sizes are split the same way (zstd sizes of the parts are close to, not exactly, additive).
`+PTX` is not counted (the measured build had none), so lists ending in +PTX are lower bounds; python
files and metadata (well under 1 MB per package) are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from faforge.costmodel.extrapolate import ClassCost, cell_cost, sass_arch_count
from faforge.costmodel.samples import Measurements, SizeSample
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels.cachekey import kernel_cache_key
from faforge.matrix.cells import Cell
from faforge.matrix.kernels import KernelPackage, kernel_key
from faforge.versions import vtuple


@dataclass(frozen=True)
class Bytes:
    raw: int
    zstd: int

    def __add__(self, other: Bytes) -> Bytes:
        return Bytes(self.raw + other.raw, self.zstd + other.zstd)

    def __mul__(self, n: int) -> Bytes:
        return Bytes(self.raw * n, self.zstd * n)

    def words(self) -> str:
        return (
            f"{self.zstd / 1e9:,.2f} GB ({self.raw / 1e9:,.1f} GB raw)"
            if self.raw >= 1e9
            else f"{self.zstd / 1e6:,.1f} MB ({self.raw / 1e6:,.1f} MB raw)"
        )


@dataclass(frozen=True)
class SizeModel:
    per_arch: Bytes  # GPU code of one SASS arch
    kernel_host: Bytes  # the kernels' host code (launchers, cutlass host side)
    glue: Bytes  # flash_api.cpp's code, linked alone

    def kernel_library(self, n_archs: int) -> Bytes:
        return self.kernel_host + self.per_arch * n_archs

    def package_before(self, n_archs: int) -> Bytes:
        return self.kernel_library(n_archs) + self.glue


def size_model(sizes: tuple[SizeSample, ...]) -> SizeModel:
    by_part = {s.part: s for s in sizes}
    missing = [p for p in ("kernel-library", "fatbin", "glue") if p not in by_part]
    if missing:
        raise FaforgeError(
            f"variants/build-measurements.yaml has no `sizes` entry for {', '.join(missing)}",
            hint=f"measure one real split build's {FLASH_ATTN.kernel_library}, "
            "its .nv_fatbin section and its glue module (variants/README.md)",
        )
    library, fat, glue = by_part["kernel-library"], by_part["fatbin"], by_part["glue"]
    if library.sass_archs != fat.sass_archs:
        raise FaforgeError("the kernel-library and fatbin `sizes` entries come from builds with different arch counts")
    per_arch = Bytes(fat.bytes // fat.sass_archs, fat.zstd_bytes // fat.sass_archs)
    return SizeModel(
        per_arch=per_arch,
        kernel_host=Bytes(library.bytes - fat.bytes, library.zstd_bytes - fat.zstd_bytes),
        glue=Bytes(glue.bytes, glue.zstd_bytes),
    )


@dataclass(frozen=True)
class NewMinor:
    """What the newest torch minor of a world added to the matrix: its cells, and the kernel builds
    that no other cell needed."""

    world: str
    torch_minor: str
    cells: int
    kernel_builds_before: int
    kernel_cpu_h_before: float
    kernel_builds_after: int
    kernel_cpu_h_after: float


def new_kernel_builds(cells: list[Cell], torch_minor: str, world: str, key: Callable[[Cell], Hashable]) -> list[Cell]:
    """Kernel builds (distinct `key`s) that the cells of one torch minor need and no other cell does."""
    mine = [c for c in cells if c.torch_minor == torch_minor and c.world == world]
    others = {key(c) for c in cells if not (c.torch_minor == torch_minor and c.world == world)}
    first: dict[Hashable, Cell] = {}
    for c in mine:
        if key(c) not in others:
            first.setdefault(key(c), c)
    return list(first.values())


@dataclass(frozen=True)
class LayoutCrossing:
    """Switching between the newest torch minor of the 32-bit Philox layout and the oldest of the 64-bit
    one on the same CUDA and archs: the user downloads the glue and the other layout's kernel package."""

    cuda: str
    cuda_archs: str
    torch_from: str
    torch_to: str
    before: Bytes
    after: Bytes

    def as_json(self) -> dict:
        return {
            "cuda": self.cuda,
            "cuda_archs": self.cuda_archs,
            "torch_from": self.torch_from,
            "torch_to": self.torch_to,
            "before": self.before.zstd,
            "after": self.after.zstd,
        }


def layout_crossing(cells: list[Cell], sizes: SizeModel) -> LayoutCrossing | None:
    """The CUDA (widest arch list first) whose cells lie on both sides of the layout change; None if none does."""
    minors: dict[tuple[str, str], dict[int, set[str]]] = {}
    for c in cells:
        minors.setdefault((c.cuda, c.cuda_archs), {}).setdefault(c.philox_offset_bits, set()).add(c.torch_minor)
    both = [(key, by_bits) for key, by_bits in minors.items() if len(by_bits) > 1]
    if not both:
        return None
    (cuda, archs), by_bits = max(both, key=lambda kv: (sass_arch_count(kv[0][1]), vtuple(kv[0][0])))
    n = sass_arch_count(archs)
    return LayoutCrossing(
        cuda=cuda,
        cuda_archs=archs,
        torch_from=max(by_bits[min(by_bits)], key=vtuple),
        torch_to=min(by_bits[max(by_bits)], key=vtuple),
        before=sizes.package_before(n),
        after=sizes.glue + sizes.kernel_library(n),
    )


@dataclass(frozen=True)
class SplitReport:
    cells: int
    kernel_builds_before: int  # compiler-cache keys
    kernel_builds_after: int  # kernel packages
    kernel_cpu_h_before: float
    kernel_cpu_h_after: float
    glue_cpu_min: float
    glue_source: str
    new_minor: NewMinor
    channel_before: Bytes
    channel_after: Bytes
    switch_archs: str
    switch_before: Bytes
    switch_after: Bytes
    crossing: LayoutCrossing | None  # a switch of torch minor that also changes the kernel package's layout

    def rows(self) -> list[list[str]]:
        m = self.new_minor
        glue_h = m.cells * self.glue_cpu_min / 60
        return [
            [
                "cold kernel builds for the whole matrix",
                f"{self.kernel_builds_before} (one per cache key)",
                f"{self.kernel_builds_after} (one per platform, CUDA, archs, Philox layout)",
            ],
            ["kernel CPU hours, whole matrix", f"{self.kernel_cpu_h_before:,.0f}", f"{self.kernel_cpu_h_after:,.0f}"],
            [
                f"adding torch {m.torch_minor} ({m.world}, {m.cells} cells): kernel compiles",
                f"{m.kernel_builds_before} builds, {m.kernel_cpu_h_before:,.0f} CPU h",
                f"{m.kernel_builds_after} builds, {m.kernel_cpu_h_after:,.0f} CPU h",
            ],
            [
                f"adding torch {m.torch_minor}: glue compiles (flash_api.cpp)",
                f"{m.cells} x {self.glue_cpu_min:.1f} CPU min = {glue_h:.1f} CPU h",
                f"{m.cells} x {self.glue_cpu_min:.1f} CPU min = {glue_h:.1f} CPU h",
            ],
            [
                "one glue build (flash_api.cpp), CPU min, measured",
                f"{self.glue_cpu_min:.1f} (inside every cell's build)",
                f"{self.glue_cpu_min:.1f} (a cell's whole compile)",
            ],
            [
                f"package bytes on the channel, whole matrix ({self.cells} cells)",
                self.channel_before.words(),
                self.channel_after.words(),
            ],
            [
                f"download when switching torch minor (same CUDA and Philox layout, archs {self.switch_archs})",
                self.switch_before.words(),
                self.switch_after.words(),
            ],
            *(
                [
                    [
                        "download when switching across the Philox layout (torch "
                        f"{x.torch_from} -> {x.torch_to} on CUDA {x.cuda}, "
                        f"archs {x.cuda_archs})",
                        x.before.words(),
                        x.after.words(),
                    ]
                ]
                if (x := self.crossing)
                else []
            ),
        ]

    def as_json(self) -> dict:
        m = self.new_minor
        return {
            "cells": self.cells,
            "kernel_builds": {"before": self.kernel_builds_before, "after": self.kernel_builds_after},
            "kernel_cpu_h": {"before": self.kernel_cpu_h_before, "after": self.kernel_cpu_h_after},
            "new_torch_minor": {
                "world": m.world,
                "torch_minor": m.torch_minor,
                "cells": m.cells,
                "kernel_builds": {"before": m.kernel_builds_before, "after": m.kernel_builds_after},
                "kernel_cpu_h": {"before": m.kernel_cpu_h_before, "after": m.kernel_cpu_h_after},
                "glue_cpu_h": round(m.cells * self.glue_cpu_min / 60, 2),
            },
            "glue_cpu_min": self.glue_cpu_min,
            "channel_bytes": {
                "before": self.channel_before.zstd,
                "after": self.channel_after.zstd,
                "before_raw": self.channel_before.raw,
                "after_raw": self.channel_after.raw,
            },
            "switch_torch_minor_bytes": {
                "cuda_archs": self.switch_archs,
                "before": self.switch_before.zstd,
                "after": self.switch_after.zstd,
            },
            **({"switch_across_philox_layout_bytes": self.crossing.as_json()} if self.crossing else {}),
        }


def split_report(
    measurements: Measurements, costs: dict[str, ClassCost], cells: list[Cell], kernels: list[KernelPackage]
) -> SplitReport:
    if not measurements.glue:
        raise FaforgeError("variants/build-measurements.yaml has no `glue` entry (a measured flash_api.cpp compile)")
    sizes = size_model(measurements.sizes)
    cpu_h = {a: cell_cost(costs, a).cpu_h for a in {c.cuda_archs for c in cells}}
    cache_keys = {kernel_cache_key(c): c.cuda_archs for c in cells}
    glue_cpu_min = round(sum(g.cpu_s for g in measurements.glue) / len(measurements.glue) / 60, 2)
    newest = max((c for c in cells if c.world == "conda-forge"), key=lambda c: vtuple(c.torch_minor))
    before_new = new_kernel_builds(cells, newest.torch_minor, newest.world, kernel_cache_key)
    after_new = new_kernel_builds(cells, newest.torch_minor, newest.world, kernel_key)
    widest = max(cells, key=lambda c: sass_arch_count(c.cuda_archs))
    n_widest = sass_arch_count(widest.cuda_archs)
    return SplitReport(
        cells=len(cells),
        kernel_builds_before=len(cache_keys),
        kernel_builds_after=len(kernels),
        kernel_cpu_h_before=round(sum(cpu_h[a] for a in cache_keys.values()), 1),
        kernel_cpu_h_after=round(sum(cpu_h[k.key.cuda_archs] for k in kernels), 1),
        glue_cpu_min=glue_cpu_min,
        glue_source=measurements.glue[0].source,
        new_minor=NewMinor(
            world=newest.world,
            torch_minor=newest.torch_minor,
            cells=sum(1 for c in cells if c.torch_minor == newest.torch_minor and c.world == newest.world),
            kernel_builds_before=len(before_new),
            kernel_cpu_h_before=round(sum(cpu_h[c.cuda_archs] for c in before_new), 1),
            kernel_builds_after=len(after_new),
            kernel_cpu_h_after=round(sum(cpu_h[c.cuda_archs] for c in after_new), 1),
        ),
        channel_before=sum((sizes.package_before(sass_arch_count(c.cuda_archs)) for c in cells), Bytes(0, 0)),
        channel_after=sum((sizes.kernel_library(sass_arch_count(k.key.cuda_archs)) for k in kernels), Bytes(0, 0))
        + sizes.glue * len(cells),
        switch_archs=widest.cuda_archs,
        switch_before=sizes.package_before(n_widest),
        switch_after=sizes.glue,
        crossing=layout_crossing(cells, sizes),
    )
