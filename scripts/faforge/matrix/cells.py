"""The build matrix: a pure function from the release table and the policy to typed cells.

A cell is one flash-attn package: one platform, python, torch build, CUDA and C++ ABI.
Its id (e.g. ``linux-64/py312/torch2.7/cu129/abi1``) names it in logs, CI jobs and files.

A pip cell (PipCell) is one flash-attn wheel beside a torch wheel of a pip world (PyPI): the same
fields plus the torch wheel and its index, and an id that starts with its world
(``pypi/linux-64/py312/torch2.11/cu130/abi1``). build_pip_cells makes them apart from build_cells, so the
conda cells, their ids and counts are what they were; a consumer opts in (Matrix.pip_cells).

Why an id is not among the cells, in words: faforge.matrix.missing_cells.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from faforge.errors import DataError
from faforge.kernels.kernel_abi import PhiloxWidths
from faforge.matrix.policy import BuildPolicy, Exclusion
from faforge.matrix.releases import PipRelease, Release, ReleaseTable
from faforge.versions import minor_of, vtuple

CELL_ID = re.compile(
    r"(?P<platform>linux-64|linux-aarch64)/py(?P<py>\d)(?P<pyminor>\d+)/torch(?P<torch>\d+\.\d+)/cu(?P<cuda>\d+)/abi(?P<abi>[01])"
)
PIP_CELL_ID = re.compile(r"(?P<world>[a-z][a-z0-9-]*)/" + CELL_ID.pattern)


# conda-forge's spelling of a CPython variant: the python_abi build string glob keeps a free-threaded
# (3.13t) or other interpreter out of the host solve; 3.13 and later name their ABI (cp313), older ones
# `cpython`. conda-forge-pinning-feedstock f875045, recipe/conda_build_config.yaml#L974-L981
# (https://github.com/conda-forge/conda-forge-pinning-feedstock/blob/f87504532b7060e6a2b55ae4d63b7960f32268af/recipe/conda_build_config.yaml#L974-L981),
# as pytorch-cpu-feedstock 74dd3d4 renders it (.ci_support/*cuda_compiler_version13.0*.yaml: python).
ABI_TAGGED_FROM = (3, 13)


def python_variant(python: str) -> str:
    """'3.12' -> '3.12.* *_cpython', '3.13' -> '3.13.* *_cp313'."""
    major, minor = (int(p) for p in python.split(".")[:2])
    return f"{python}.* *_{f'cp{major}{minor}' if (major, minor) >= ABI_TAGGED_FROM else 'cpython'}"


@dataclass(frozen=True)
class Cell:
    platform: str
    world: str
    python: str
    torch: str
    cuda: str
    cxx11_abi: int
    cuda_archs: str
    philox_offset_bits: int  # the torch's at::PhiloxCudaState layout, so its kernel library (kernel-abi.yaml)
    host_gcc: str
    c_stdlib_version: str
    channels: tuple[str, ...]

    @property
    def torch_minor(self) -> str:
        return minor_of(self.torch)

    @property
    def cuda_tag(self) -> str:
        return "cu" + self.cuda.replace(".", "")

    @property
    def python_tag(self) -> str:
        return "py" + self.python.replace(".", "")

    @property
    def id(self) -> str:
        return f"{self.platform}/{self.python_tag}/torch{self.torch_minor}/{self.cuda_tag}/abi{self.cxx11_abi}"

    @property
    def sort_key(self) -> tuple:
        return (self.platform, self.world, vtuple(self.torch), vtuple(self.cuda), vtuple(self.python))

    def variant(self) -> dict[str, str]:
        """The variant-config values for rattler-build / conda-build (all strings)."""
        return {
            "python": python_variant(self.python),
            "torch_version": self.torch,
            "torch_world": self.world,
            "cuda_compiler_version": self.cuda,
            "cxx11_abi": str(self.cxx11_abi),
            "cuda_archs": self.cuda_archs,
            "philox_offset_bits": str(self.philox_offset_bits),
            "c_compiler_version": self.host_gcc,
            "cxx_compiler_version": self.host_gcc,
            "c_stdlib_version": self.c_stdlib_version,
        }


@dataclass(frozen=True)
class PipCell(Cell):
    """A flash-attn wheel for one torch wheel of a pip world. `channels` are the world's conda channels its
    kernel package is built with, when no conda cell shares its kernel key (faforge.matrix.kernels)."""

    wheel: str  # the torch wheel file this cell's glue is built against and installs beside (releases.yaml source)
    index: str  # the index that serves that wheel (PyPI's, or one of PyTorch's per-CUDA indexes)

    @property
    def id(self) -> str:
        return f"{self.world}/{super().id}"

    @property
    def index_name(self) -> str:
        """Our wheel index for this cell: one per (torch minor, CUDA), as PyTorch lays out theirs: torch2.11-cu130."""
        return f"torch{self.torch_minor}-{self.cuda_tag}"

    @property
    def python_wheel_tag(self) -> str:
        """cp312: the wheel's python and ABI tag (one CPython per glue wheel)."""
        return "cp" + self.python.replace(".", "")

    @property
    def requires_python(self) -> str:
        """>=3.12,<3.13: the one CPython the glue wheel is built for."""
        major, minor = vtuple(self.python)
        return f">={major}.{minor},<{major}.{minor + 1}"


def _newest_patch_per_minor_and_cuda(rows: list[Release]) -> list[Release]:
    newest: dict[tuple, Release] = {}
    for row in rows:
        key = (row.world, row.torch_minor, row.cuda)
        if key not in newest or vtuple(row.torch) > vtuple(newest[key].torch):
            newest[key] = row
    return list(newest.values())


def candidate_cells(table: ReleaseTable, policy: BuildPolicy, philox: PhiloxWidths) -> list[tuple[Cell, str | None]]:
    """Every cell the policy admits, each with the reason it is excluded (or None). Each torch minor
    admitted needs its row in variants/kernel-abi.yaml (`philox`), excluded cells' minors too."""
    out = []
    in_scope = [
        r
        for r in table.releases
        if vtuple(r.cuda) >= vtuple(policy.min_cuda) and vtuple(r.torch_minor) >= vtuple(policy.min_torch)
    ]
    for row in _newest_patch_per_minor_and_cuda(in_scope):
        world = table.worlds[row.world]
        for platform in row.platforms:
            for python in (p for p in row.python if vtuple(p) >= vtuple(policy.min_python)):
                cell = Cell(
                    platform=platform,
                    world=row.world,
                    python=python,
                    torch=row.torch,
                    cuda=row.cuda,
                    cxx11_abi=world.cxx11_abi,
                    cuda_archs=policy.pick("cuda_archs", row.cuda),
                    philox_offset_bits=philox.of(row.torch_minor),
                    host_gcc=policy.pick("host_gcc", row.cuda, row.world),
                    c_stdlib_version=policy.pick("c_stdlib_version", row.cuda),
                    channels=world.channels,
                )
                excluded = policy.exclusion_for(
                    world=row.world, torch=row.torch_minor, cuda=row.cuda, python=python, platform=platform
                )
                out.append((cell, excluded.reason if excluded else None))
    return sorted(out, key=lambda pair: pair[0].sort_key)


def build_cells(table: ReleaseTable, policy: BuildPolicy, philox: PhiloxWidths) -> list[Cell]:
    """The matrix: admitted cells minus exclusions, with ids checked unique."""
    candidates = candidate_cells(table, policy, philox)
    # Computed only when an exclusion matches no conda cell: it may name a pip world's cells
    # (build_pip_cells applies it).
    pip: list = []
    for i, exclusion in enumerate(policy.exclude):

        def matches(pairs: Sequence[tuple[Cell, str | None]], exclusion: Exclusion = exclusion) -> bool:
            return any(
                exclusion.matches(world=c.world, torch=c.torch_minor, cuda=c.cuda, python=c.python, platform=c.platform)
                for c, _ in pairs
            )

        if not matches(candidates) and not matches(pip := pip or candidate_pip_cells(table, policy, philox)):
            raise DataError(
                policy.path,
                f"exclude[{i}]",
                f"matches no cell: {exclusion.fields}",
                hint="remove the stale exclusion, or fix its fields",
            )
    cells = [cell for cell, reason in candidates if reason is None]
    seen: dict[str, Cell] = {}
    for cell in cells:
        if cell.id in seen:
            raise DataError(
                table.path,
                "releases",
                f"two cells share the id {cell.id} ({seen[cell.id].world} and {cell.world})",
                hint="give the worlds different C++ ABIs or split the table",
            )
        seen[cell.id] = cell
    return cells


def _newest_pip_rows(rows: Iterable[PipRelease]) -> list[tuple[PipRelease, str]]:
    """(row, platform) of the newest patch per (world, minor, CUDA, platform): a pip world may split a
    release by platform, so the newest is chosen per platform."""
    newest: dict[tuple, PipRelease] = {}
    for row in rows:
        for platform in row.platforms:
            key = (row.world, row.torch_minor, row.cuda, platform)
            if key not in newest or vtuple(row.torch) > vtuple(newest[key].torch):
                newest[key] = row
    return [(row, key[3]) for key, row in newest.items()]


def candidate_pip_cells(
    table: ReleaseTable, policy: BuildPolicy, philox: PhiloxWidths
) -> list[tuple[PipCell, str | None]]:
    """Every pip cell the policy admits (CUDA, python and the pip worlds' torch floor), each with the reason
    it is excluded (or None). The C++ ABI is the row's own; host compilers follow the policy's rules for the
    world (variants/matrix.yaml host_gcc), which keep a kernel key shared with a conda world identical."""
    floor = policy.pip_min_torch or policy.min_torch
    in_scope = [
        r
        for r in table.pip_releases
        if vtuple(r.cuda) >= vtuple(policy.min_cuda) and vtuple(r.torch_minor) >= vtuple(floor)
    ]
    out = []
    for row, platform in _newest_pip_rows(in_scope):
        world = table.pip_worlds[row.world]
        for python in (p for p in row.python if vtuple(p) >= vtuple(policy.min_python)):
            cell = PipCell(
                platform=platform,
                world=row.world,
                python=python,
                torch=row.torch,
                cuda=row.cuda,
                cxx11_abi=row.cxx11_abi,
                cuda_archs=policy.pick("cuda_archs", row.cuda),
                philox_offset_bits=philox.of(row.torch_minor),
                host_gcc=policy.pick("host_gcc", row.cuda, row.world),
                c_stdlib_version=policy.pick("c_stdlib_version", row.cuda),
                channels=world.channels,
                wheel=row.wheel(python, platform),
                index=table.index_of(row),
            )
            excluded = policy.exclusion_for(
                world=row.world, torch=row.torch_minor, cuda=row.cuda, python=python, platform=platform
            )
            out.append((cell, excluded.reason if excluded else None))
    return sorted(out, key=lambda pair: pair[0].sort_key)


def build_pip_cells(table: ReleaseTable, policy: BuildPolicy, philox: PhiloxWidths) -> list[PipCell]:
    """The pip cells: admitted minus exclusions, ids unique (a stale exclusion is build_cells' error)."""
    cells = [cell for cell, reason in candidate_pip_cells(table, policy, philox) if reason is None]
    seen: dict[str, PipCell] = {}
    for cell in cells:
        if cell.id in seen:
            raise DataError(
                table.path,
                "releases",
                f"two pip cells share the id {cell.id}: torch {seen[cell.id].torch} from "
                f"{seen[cell.id].index} and {cell.torch} from {cell.index}",
                hint="keep one row per torch minor, CUDA and platform in a pip world",
            )
        seen[cell.id] = cell
    return cells


def find_cell(cells: list[Cell], key: str) -> Cell | None:
    return next((c for c in cells if key == c.id), None)
