"""flash-attn 2's `matrix` namespace (faforge.matrix.stage.MatrixFamily): its cells and kernel packages are the
build matrix's own rows (faforge.matrix.cells and .kernels), listed by `faforge matrix` and `--kernels`, so
it adds no packages and no listing of its own."""

from __future__ import annotations

from pathlib import Path

from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable
from faforge.matrix.stage import ListingOption

listing_option: ListingOption | None = None


def rows(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> None:
    """None: the cells are the matrix's own."""
    return None
