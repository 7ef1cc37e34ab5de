"""flash-attn 4 on the channel page (faforge.release.page.PageFamily). STUB."""

from __future__ import annotations

from collections.abc import Sequence

from faforge.family import FLASH_ATTN_4
from faforge.matrix import Matrix
from faforge.matrix.releases import ReleaseTable
from faforge.release.package import PackageFacts

key = FLASH_ATTN_4.key
conda_packages = (FLASH_ATTN_4.package,)


def entries(packages: Sequence[PackageFacts], channel: str, table: ReleaseTable) -> list[dict]:
    return []


def pip_entries(matrix: Matrix, base: str, index: str | None) -> list[dict]:
    return []


def summary(entries: list[dict]) -> str | None:
    return None
