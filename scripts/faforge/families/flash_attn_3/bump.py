"""FlashAttention-3 in `faforge bump`: a new torch release can widen the torch range its packages serve, so
their variant files are regenerated with the cells' (faforge.release.bump.BumpFamily)."""

from __future__ import annotations

from pathlib import Path

from faforge.families.flash_attn_3.matrix import fa3_packages, load_fa3_policy
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable
from faforge.matrix.variants import generated_files


def variant_files(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> dict[Path, str]:
    """Its packages' variant files for `table` (faforge.matrix.variants.generated_files, no cells)."""
    return generated_files([], variants_dir, fa3_packages(table, policy, load_fa3_policy(policy.path)))
