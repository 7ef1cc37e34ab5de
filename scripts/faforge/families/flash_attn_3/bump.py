"""FlashAttention-3 in `faforge bump`: a new torch release can widen the torch range its packages serve, so
their variant files are regenerated with the cells' (faforge.release.bump.releases.BumpFamily)."""

from __future__ import annotations

from pathlib import Path

from faforge.families.flash_attn_3.matrix import rows
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable


def variant_files(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> dict[Path, str]:
    """Its packages' variant files for `table`, as `faforge generate` writes them (its matrix rows)."""
    return rows(table, policy, variants_dir).variant_files()


def proposals(mirror: str | None, gate: bool) -> None:
    return None  # its releases are the matrix's rows, which the torch sources bring
