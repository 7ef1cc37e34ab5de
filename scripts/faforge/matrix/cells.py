"""The build matrix: a pure function from the release table and the policy to typed cells.

A cell is one flash-attn package: one platform, python, torch build, CUDA and C++ ABI.
Its id (e.g. ``linux-64/py312/torch2.7/cu129/abi1``) names it in logs, CI jobs and files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faforge.errors import DataError, FaforgeError
from faforge.kernels.kernel_abi import PhiloxWidths
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import Release, ReleaseTable
from faforge.versions import minor_of, vtuple

CELL_ID = re.compile(r"(?P<platform>linux-64|linux-aarch64)/py(?P<py>\d)(?P<pyminor>\d+)/torch(?P<torch>\d+\.\d+)/cu(?P<cuda>\d+)/abi(?P<abi>[01])")


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
        r for r in table.releases
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
    for i, exclusion in enumerate(policy.exclude):
        if not any(exclusion.matches(world=c.world, torch=c.torch_minor, cuda=c.cuda, python=c.python, platform=c.platform) for c, _ in candidates):
            raise DataError(policy.path, f"exclude[{i}]", f"matches no cell: {exclusion.fields}", hint="remove the stale exclusion, or fix its fields")
    cells = [cell for cell, reason in candidates if reason is None]
    seen: dict[str, Cell] = {}
    for cell in cells:
        if cell.id in seen:
            raise DataError(table.path, "releases", f"two cells share the id {cell.id} ({seen[cell.id].world} and {cell.world})", hint="give the worlds different C++ ABIs or split the table")
        seen[cell.id] = cell
    return cells


def explain_missing(table: ReleaseTable, policy: BuildPolicy, cell_id: str) -> str:
    """Why a well-formed cell id is not in the matrix, in words that name the cell."""
    match = CELL_ID.fullmatch(cell_id)
    if not match:
        return f"{cell_id!r} is not a cell id (expected e.g. linux-64/py312/torch2.7/cu129/abi1)"
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
        return f"{cell_id}: {world.name} has no torch {torch_minor} build for CUDA {match['cuda'][:-1]}.{match['cuda'][-1]} (it has {', '.join(cudas)})"
    row = next(r for r in rows if r.cuda == cuda)
    if platform not in row.platforms:
        return f"{cell_id}: {world.name} torch {row.torch} with CUDA {cuda} exists only for {', '.join(row.platforms)}"
    if python not in row.python:
        return f"{cell_id}: {world.name} torch {row.torch} with CUDA {cuda} exists only for python {', '.join(row.python)}"
    if vtuple(cuda) < vtuple(policy.min_cuda):
        return f"{cell_id}: CUDA {cuda} is below the matrix floor {policy.min_cuda} ({policy.path.name}: min_cuda)"
    if vtuple(torch_minor) < vtuple(policy.min_torch):
        return f"{cell_id}: torch {torch_minor} is below the matrix floor {policy.min_torch} ({policy.path.name}: min_torch)"
    if vtuple(python) < vtuple(policy.min_python):
        return f"{cell_id}: python {python} is below the matrix floor {policy.min_python} ({policy.path.name}: min_python)"
    excluded = policy.exclusion_for(world=world.name, torch=torch_minor, cuda=cuda, python=python, platform=platform)
    if excluded:
        return f"{cell_id}: excluded in {policy.path.name}: {excluded.reason}"
    return f"{cell_id}: not in the matrix"


def find_cell(cells: list[Cell], key: str) -> Cell | None:
    return next((c for c in cells if key == c.id), None)


def require_cells_exist(cells: list[Cell], table: ReleaseTable, policy: BuildPolicy, keys: list[str]) -> None:
    for key in keys:
        if find_cell(cells, key) is None:
            raise FaforgeError(explain_missing(table, policy, key), hint="`faforge matrix` lists every cell")
