"""flash-attn 4's build stage (faforge.release.build.stage.BuildFamily). STUB."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

from faforge.family import FLASH_ATTN_4
from faforge.matrix import Matrix
from faforge.matrix.render import SourceOverride
from faforge.release.build.stage import Batch, BuildRequest, BuildWhere, BuildWords

words = BuildWords(
    ids=(),
    parts=(),
    whole=(),
    source=f"(nothing: {FLASH_ATTN_4.package} packages are not built yet)",
    listing="",
    named="",
    built=f"{FLASH_ATTN_4.package} packages",
    about="",
)


def owns(matrix: Matrix, key: str) -> bool:
    return False


def refusal(matrix: Matrix, key: str) -> str | None:
    return None


def example(matrix: Matrix) -> str | None:
    return None


@dataclass(frozen=True)
class NoJobs:
    from_recipe: bool = False

    def batches(self, where: BuildWhere, stack: ExitStack) -> list[Batch]:
        return []


def jobs(matrix: Matrix, wanted: list[tuple[str, str]], request: BuildRequest, source: SourceOverride | None) -> NoJobs:
    return NoJobs()
