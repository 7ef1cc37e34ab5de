"""The build matrix: release facts + selection policy -> cells -> variant configs -> renders.

The cells are the matrix's own; each family adds its own packages through its `matrix` namespace
(faforge.matrix.stage), which the callers pass in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from faforge import paths
from faforge.family import FLASH_ATTN
from faforge.kernels.kernel_abi import PhiloxWidths, load_philox_widths
from faforge.matrix.cells import Cell, PipCell, build_cells, build_pip_cells
from faforge.matrix.kernels import KernelPackage, all_kernel_packages, kernel_packages, pip_kernel_packages
from faforge.matrix.policy import BuildPolicy, load_policy
from faforge.matrix.releases import ReleaseTable
from faforge.matrix.releases_read import load_releases
from faforge.matrix.stage import FamilyRows, FamilyWithMatrix


@dataclass(frozen=True)
class Matrix:
    table: ReleaseTable
    policy: BuildPolicy
    cells: list[Cell]
    philox: PhiloxWidths  # variants/kernel-abi.yaml: each torch minor's kernel library layout
    kernels: list[KernelPackage]  # one per (platform, CUDA, archs, Philox layout); each names the cells that need it
    variants_dir: Path
    recipe_path: Path
    # The pip worlds, apart so that every consumer of the conda cells is unchanged; a consumer opts in.
    pip_cells: list[PipCell] = field(default_factory=list)  # pypi/<platform>/py312/torch2.11/cu130/abi1, ...
    pip_kernels: list[KernelPackage] = field(
        default_factory=list
    )  # the kernel packages only pip cells need (CUDA 12.8, 13.2)
    # Each family's own packages (faforge.matrix.stage), in the order of the families load_matrix was given.
    families: tuple[FamilyRows, ...] = ()

    @property
    def all_kernels(self) -> list[KernelPackage]:
        """Every kernel package once, with the cells of every world, conda and pip, that pin it."""
        return all_kernel_packages(self.kernels, self.pip_kernels, self.pip_cells)

    def rows_of(self, key: str) -> FamilyRows | None:
        """The packages of the family whose key is `key`, if it has any and load_matrix was given it."""
        return next((rows for rows in self.families if rows.key == key), None)


def load_matrix(root: Path | None = None, families: Sequence[FamilyWithMatrix] = ()) -> Matrix:
    """The matrix of the checkout at `root` (default: this one), with the packages of `families`."""
    root = root or paths.repo_root()
    variants_dir = root / "variants"
    table = load_releases(variants_dir / "releases.yaml")
    policy = load_policy(variants_dir / "matrix.yaml")
    philox = load_philox_widths(variants_dir / "kernel-abi.yaml")
    cells = build_cells(table, policy, philox)
    pip_cells = build_pip_cells(table, policy, philox)
    kernels = kernel_packages(
        cells, version=policy.flash_attn_version, build_number=policy.build_number, releases_path=table.path
    )
    return Matrix(
        table=table,
        policy=policy,
        cells=cells,
        philox=philox,
        kernels=kernels,
        variants_dir=variants_dir,
        recipe_path=root / FLASH_ATTN.recipe_dir / "recipe.yaml",
        pip_cells=pip_cells,
        pip_kernels=pip_kernel_packages(
            kernels, pip_cells, version=policy.flash_attn_version, build_number=policy.build_number
        ),
        families=tuple(rows for f in families if (rows := f.matrix.rows(table, policy, variants_dir)) is not None),
    )
