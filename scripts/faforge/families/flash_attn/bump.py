"""flash-attn 2 in `faforge bump`: its packages are the matrix's cells, whose variant files bump regenerates
itself (faforge.release.bump.releases.write), so it adds none (faforge.release.bump.releases.BumpFamily)."""

from __future__ import annotations

from pathlib import Path

from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable


def variant_files(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> dict[Path, str]:
    return {}


def proposals(mirror: str | None, gate: bool) -> None:
    return None  # its releases are the matrix's cells, which the torch sources bring
