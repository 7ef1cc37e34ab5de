"""flash-attn 4's `matrix` namespace (faforge.matrix.stage.MatrixFamily). STUB: no packages yet."""

from __future__ import annotations

from pathlib import Path

from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable
from faforge.matrix.stage import ListingOption

listing_option: ListingOption | None = None


def rows(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> None:
    return None
