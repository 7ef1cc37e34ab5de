"""The torch release table (variants/releases.yaml): which torch builds exist, per world.

Two kinds of world. A conda world (conda-forge, the legacy pytorch channel) installs torch into a conda
environment from its channels and has one C++ ABI. A pip world (pypi) is a wheel index pip and uv
install torch from; each of its rows carries the ABI its own torch build was read to have (PyPI's x86_64
torch is ABI 0 up to 2.6 and 1 from 2.7) and the wheel file names it was read from, one per python and
platform. The two are kept apart (`worlds`/`releases` against `pip_worlds`/`pip_releases`), so every
consumer of the conda worlds sees exactly what it saw before the pip world existed.

Here: the table's types and its canonical text (dump_releases); reading it, with its rules, is
faforge.matrix.releases_read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from faforge.abi.platforms import MACHINE_PLATFORM as WHEEL_ARCH_PLATFORMS
from faforge.abi.platforms import PLATFORMS
from faforge.versions import minor_of, vtuple

# A CPython torch wheel as PyPI and PyTorch's per-CUDA indexes name it:
# torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl, torch-2.10.0-3-cp312-... (a build tag: a rebuild, which pip
# prefers), torch-2.8.0+cu126-cp312-... (a local label). Free-threaded wheels (cp313t) are no cell's: their ABI tag
# differs from the python tag, so they do not match.
TORCH_WHEEL = re.compile(
    r"torch-(?P<version>\d+\.\d+\.\d+)(?:\+(?P<local>[0-9a-z.]+))?(?:-(?P<build>\d[0-9A-Za-z_.]*))?"
    r"-cp(?P<py>3\d{1,2})-cp(?P=py)-(?P<tags>(?:many)?linux[0-9a-z_.]*?_(?P<arch>x86_64|aarch64))\.whl"
)


def wheel_python(match: re.Match) -> str:
    """The dotted python of a TORCH_WHEEL match: cp312 -> '3.12'."""
    return f"{match['py'][0]}.{match['py'][1:]}"


@dataclass(frozen=True)
class World:
    """A way of getting torch into a conda env: conda-forge, or the legacy pytorch channel."""

    name: str
    channels: tuple[str, ...]
    cxx11_abi: int
    platforms: tuple[str, ...]


@dataclass(frozen=True)
class Release:
    """One torch version built for one CUDA version in one world."""

    world: str
    torch: str
    cuda: str
    python: tuple[str, ...]
    platforms: tuple[str, ...]
    source: tuple[str, ...]
    # conda-forge also publishes a Jetson (tegra) linux-aarch64 build of this torch+CUDA;
    # we build sbsa only, and the run requirements keep tegra out.
    tegra: bool = False

    @property
    def torch_minor(self) -> str:
        return minor_of(self.torch)


@dataclass(frozen=True)
class PipWorld:
    """A wheel index that pip and uv install torch from (PyPI). Our own kernel packages for the keys no conda
    world has are built with rattler-build from `channels` (the compilers and CUDA toolkit)."""

    name: str
    index: str  # the PEP 503/691 index root, e.g. https://pypi.org/simple
    channels: tuple[str, ...]
    platforms: tuple[str, ...]


@dataclass(frozen=True)
class PipRelease:
    """One torch version's CUDA build on a wheel index, for some platforms: its C++ ABI read from the build
    (torch/lib/libc10.so), its CUDA from torch/version.py, and one wheel file name per python and platform."""

    world: str
    torch: str
    cuda: str
    python: tuple[str, ...]
    platforms: tuple[str, ...]
    cxx11_abi: int
    source: tuple[str, ...]  # the wheel file names, one per (python, platform)
    index: str | None = None  # another index than the world's (one of PyTorch's per-CUDA indexes)

    @property
    def torch_minor(self) -> str:
        return minor_of(self.torch)

    def wheel(self, python: str, platform: str) -> str:
        """The torch wheel of this row for `python` on `platform` (the loader checks there is exactly one)."""
        for name in self.source:
            match = TORCH_WHEEL.fullmatch(name)
            if match and wheel_python(match) == python and WHEEL_ARCH_PLATFORMS[match["arch"]] == platform:
                return name
        raise KeyError((self.torch, python, platform))


@dataclass(frozen=True)
class ReleaseTable:
    path: Path
    worlds: dict[str, World]
    releases: tuple[Release, ...]
    pip_worlds: dict[str, PipWorld] = field(default_factory=dict)
    pip_releases: tuple[PipRelease, ...] = ()

    def rows_for(self, world: str, torch_minor: str) -> list[Release]:
        return [r for r in self.releases if r.world == world and r.torch_minor == torch_minor]

    def index_of(self, row: PipRelease) -> str:
        """The index a pip row's wheels are on: its own, else its world's."""
        return row.index or self.pip_worlds[row.world].index


def dump_releases(table: ReleaseTable, header: str) -> str:
    """The canonical text of the table: header comment, worlds, then sorted rows."""
    lines = [header.rstrip("\n"), "schema: 1", "worlds:"]
    for world in table.worlds.values():
        lines += [
            f"  {world.name}:",
            f"    channels: [{', '.join(world.channels)}]",
            f"    cxx11_abi: {world.cxx11_abi}",
            f"    platforms: [{', '.join(world.platforms)}]",
        ]
    for pip in table.pip_worlds.values():
        lines += [
            f"  {pip.name}:",
            f"    index: {pip.index}",
            f"    channels: [{', '.join(pip.channels)}]",
            f"    platforms: [{', '.join(pip.platforms)}]",
        ]
    lines.append("releases:")
    world_order = list(table.worlds)
    rows = sorted(table.releases, key=lambda r: (world_order.index(r.world), vtuple(r.torch), vtuple(r.cuda)))
    for r in rows:
        lines += _row_head(r)
        if r.tegra:
            lines.append("  tegra: true")
        if len(r.source) == 1:
            lines.append(f"  source: {r.source[0]}")
        else:
            lines.append("  source:")
            lines += [f"  - {s}" for s in r.source]
    pip_order = list(table.pip_worlds)
    for row in sorted(
        table.pip_releases,
        key=lambda r: (
            pip_order.index(r.world),
            vtuple(r.torch),
            vtuple(r.cuda),
            [PLATFORMS.index(p) for p in r.platforms],
        ),
    ):
        lines += [*_row_head(row), f"  cxx11_abi: {row.cxx11_abi}"]
        if row.index:
            lines.append(f"  index: {row.index}")
        lines.append("  source:")
        lines += [f"  - {s}" for s in sorted(row.source, key=_wheel_order)]
    return "\n".join(lines) + "\n"


def _row_head(r: Release | PipRelease) -> list[str]:
    """The lines a conda row and a pip row both start with, in the canonical order."""
    return [
        f"- world: {r.world}",
        f"  torch: {r.torch}",
        f"  cuda: '{r.cuda}'",
        f"  python: [{', '.join(repr(p) for p in r.python)}]",
        f"  platforms: [{', '.join(r.platforms)}]",
    ]


def _wheel_order(name: str) -> tuple:
    match = TORCH_WHEEL.fullmatch(name)
    return (
        (PLATFORMS.index(WHEEL_ARCH_PLATFORMS[match["arch"]]), vtuple(wheel_python(match)))
        if match
        else (len(PLATFORMS), ())
    )


def header_of(text: str) -> str:
    """The leading comment block of a data file, kept verbatim on rewrite."""
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    return "\n".join(header) + "\n"
