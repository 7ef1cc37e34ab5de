"""flash-attn 4 in `faforge bump` (faforge.release.bump.releases.BumpFamily). STUB."""

from __future__ import annotations

from pathlib import Path

from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable


def variant_files(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> dict[Path, str]:
    return {}
