"""The build matrix: a pure function from the release table and the policy to typed cells.

A cell is one flash-attn package: one platform, python, torch build, CUDA and C++ ABI.
Its id (e.g. ``linux-64/py312/torch2.7/cu129/abi1``) names it in logs, CI jobs and files.

A pip cell (PipCell) is one flash-attn wheel beside a torch wheel of a pip world (PyPI): the same
fields plus the torch wheel and its index, and an id that starts with its world
(``pypi/linux-64/py312/torch2.11/cu130/abi1``). build_pip_cells makes them apart from build_cells, so the
conda cells, their ids and counts are what they were; a consumer opts in (Matrix.pip_cells).
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


def explain_missing(table: ReleaseTable, policy: BuildPolicy, cell_id: str) -> str:
    """Why a well-formed cell id is not in the matrix, in words that name the cell."""
    pip = PIP_CELL_ID.fullmatch(cell_id)
    if pip and pip["world"] in table.pip_worlds:
        return _explain_missing_pip(table, policy, cell_id, pip)
    match = CELL_ID.fullmatch(cell_id)
    if not match:
        return (
            f"{cell_id!r} is not a cell id (expected e.g. linux-64/py312/torch2.7/cu129/abi1, "
            "or pypi/linux-64/py312/torch2.11/cu130/abi1)"
        )
    platform, torch_minor, abi = match["platform"], match["torch"], int(match["abi"])
    python = f"{match['py']}.{match['pyminor']}"
    worlds = [w for w in table.worlds.values() if w.cxx11_abi == abi]
    if not worlds:
        return f"{cell_id}: no torch world uses C++ ABI {abi}"
    world = worlds[0]
    rows = table.rows_for(world.name, torch_minor)
    if platform not in world.platforms:
        return f"{cell_id}: the {world.name} world has no {platform} builds (it has {', '.join(world.platforms)})"
    if not rows:
        have = sorted({r.torch_minor for r in table.releases if r.world == world.name}, key=vtuple)
        return f"{cell_id}: {world.name} has no torch {torch_minor} (it has {', '.join(have)})"
    cudas = sorted({r.cuda for r in rows}, key=vtuple)
    by_tag = {c.replace(".", ""): c for c in cudas}
    cuda = by_tag.get(match["cuda"])
    if cuda is None:
        return (
            f"{cell_id}: {world.name} has no torch {torch_minor} build for CUDA "
            f"{match['cuda'][:-1]}.{match['cuda'][-1]} (it has {', '.join(cudas)})"
        )
    row = next(r for r in rows if r.cuda == cuda)
    if platform not in row.platforms:
        return f"{cell_id}: {world.name} torch {row.torch} with CUDA {cuda} exists only for {', '.join(row.platforms)}"
    if python not in row.python:
        return (
            f"{cell_id}: {world.name} torch {row.torch} with CUDA {cuda} exists only for python {', '.join(row.python)}"
        )
    if vtuple(cuda) < vtuple(policy.min_cuda):
        return f"{cell_id}: CUDA {cuda} is below the matrix floor {policy.min_cuda} ({policy.path.name}: min_cuda)"
    if vtuple(torch_minor) < vtuple(policy.min_torch):
        return (
            f"{cell_id}: torch {torch_minor} is below the matrix "
            f"floor {policy.min_torch} ({policy.path.name}: min_torch)"
        )
    if vtuple(python) < vtuple(policy.min_python):
        return (
            f"{cell_id}: python {python} is below the matrix floor {policy.min_python} ({policy.path.name}: min_python)"
        )
    excluded = policy.exclusion_for(world=world.name, torch=torch_minor, cuda=cuda, python=python, platform=platform)
    if excluded:
        return f"{cell_id}: excluded in {policy.path.name}: {excluded.reason}"
    return f"{cell_id}: not in the matrix"


def _explain_missing_pip(table: ReleaseTable, policy: BuildPolicy, cell_id: str, match: re.Match) -> str:
    world, platform, torch_minor, abi = match["world"], match["platform"], match["torch"], int(match["abi"])
    python = f"{match['py']}.{match['pyminor']}"
    rows = [
        r for r in table.pip_releases if r.world == world and r.torch_minor == torch_minor and platform in r.platforms
    ]
    if not rows:
        have = sorted(
            {r.torch_minor for r in table.pip_releases if r.world == world and platform in r.platforms}, key=vtuple
        )
        return (
            f"{cell_id}: {world} has no CUDA build of torch {torch_minor} "
            f"for {platform} (it has {', '.join(have) or 'none'})"
        )
    row = next((r for r in rows if r.cuda.replace(".", "") == match["cuda"]), None)
    if row is None:
        return (
            f"{cell_id}: {world}'s torch {torch_minor} for {platform} is built "
            f"for CUDA {', '.join(sorted({r.cuda for r in rows}, key=vtuple))}"
        )
    if row.cxx11_abi != abi:
        return (
            f"{cell_id}: {world}'s torch {row.torch} with CUDA "
            f"{row.cuda} is C++ ABI {row.cxx11_abi}, read from its build"
        )
    if python not in row.python:
        return (
            f"{cell_id}: {world}'s torch {row.torch} with CUDA {row.cuda} "
            f"has wheels only for python {', '.join(row.python)}"
        )
    floor = policy.pip_min_torch or policy.min_torch
    for value, least, key in (
        (row.cuda, policy.min_cuda, "min_cuda"),
        (torch_minor, floor, "pip.min_torch"),
        (python, policy.min_python, "min_python"),
    ):
        if vtuple(value) < vtuple(least):
            return f"{cell_id}: {value} is below the matrix floor {least} ({policy.path.name}: {key})"
    excluded = policy.exclusion_for(world=world, torch=torch_minor, cuda=row.cuda, python=python, platform=platform)
    if excluded:
        return f"{cell_id}: excluded in {policy.path.name}: {excluded.reason}"
    return f"{cell_id}: not in the matrix"


def find_cell(cells: list[Cell], key: str) -> Cell | None:
    return next((c for c in cells if key == c.id), None)
