"""FlashAttention-4's build stage (faforge.release.build.stage.BuildFamily): its ids are the matrix's packages
(noarch/torch<minor>-cu<CUDA>/<version>, `faforge matrix --fa4`), one job each, built from recipes/flash-attn-4 and
the generated variant file. Nothing compiles: the job repacks upstream's wheel with its set's run pins and runs the
recipe's import test, whose environment needs the set, quack-kernels and apache-tvm-ffi included (recipes/ builds
those two; name their channel with --extra-channel)."""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import dataclass

from faforge.families.flash_attn_4.matrix import Fa4Package, Fa4Rows, rows
from faforge.family import FLASH_ATTN_4
from faforge.matrix import Matrix
from faforge.matrix.render import SourceOverride
from faforge.release.build.pip import WheelBuild
from faforge.release.build.stage import Batch, BuildRequest, BuildWhere, BuildWords
from faforge.release.build.steps import CellBuild, build_step
from faforge.release.reporter import Reporter

PACKAGE_ID = re.compile(r"noarch/torch\d+\.\d+-cu\d+/[0-9][0-9a-z.]*")
NAME = FLASH_ATTN_4.package

words = BuildWords(
    ids=(f"{NAME} package ids as `faforge matrix --fa4` does",),
    parts=(),
    whole=(f"{NAME} package",),
    source=f"(nothing for {NAME}: its source is upstream's wheel, named with its sha256 in the data file)",
    listing=f"`faforge matrix --fa4` every {NAME} package",
    named=f"{NAME} packages (`faforge matrix --fa4`)",
    built=f"{NAME} packages",
    about=(
        f"A FlashAttention-4 package id (`faforge matrix --fa4`: noarch/torch<minor>-cu<CUDA>/<version>) builds that "
        f"noarch package from {FLASH_ATTN_4.recipe_dir}: upstream's wheel with its known-good set as run pins."
    ),
)


def rows_of(matrix: Matrix) -> Fa4Rows:
    """Its rows in the matrix, read from its variants/ where load_matrix was not given this family."""
    found = matrix.rows_of(FLASH_ATTN_4.key)
    return found if isinstance(found, Fa4Rows) else rows(matrix.table, matrix.policy, matrix.variants_dir)


def packages_of(matrix: Matrix) -> list[Fa4Package]:
    return list(rows_of(matrix).packages)


def owns(matrix: Matrix, key: str) -> bool:
    return any(p.id == key for p in packages_of(matrix))


def refusal(matrix: Matrix, key: str) -> str | None:
    """A package id the matrix lacks: which it has."""
    if not PACKAGE_ID.fullmatch(key):
        return None
    ids = [p.id for p in packages_of(matrix)]
    return f"{key}: no {NAME} package of the matrix has this id (it has {', '.join(ids) or 'none'})"


def example(matrix: Matrix) -> str | None:
    packages = packages_of(matrix)
    return f"a {NAME} package id (e.g. {packages[0].id})" if packages else None


@dataclass(frozen=True)
class PackageJobs:
    """This run's packages (faforge.release.build.stage.FamilyJobs), each rendered from its variant file."""

    matrix: Matrix
    jobs: list[Fa4Package]

    @property
    def from_recipe(self) -> bool:
        return False  # --source replaces no source of ours: the recipe's is upstream's wheel

    def batches(self, where: BuildWhere, stack: ExitStack) -> list[Batch]:
        return (
            [Batch(len(self.jobs), lambda report, first, total: self._run(where, report, first, total))]
            if self.jobs
            else []
        )

    def _run(self, where: BuildWhere, report: Reporter, first: int, total: int) -> list[CellBuild | WheelBuild]:
        rendered = {r.package.id: r for r in rows_of(self.matrix).render()}
        return [
            build_step(f"[{i}/{total}] {NAME} {package.id}", rendered[package.id], report, **vars(where))
            for i, package in enumerate(self.jobs, first)
        ]


def jobs(
    matrix: Matrix, wanted: list[tuple[str, str]], request: BuildRequest, source: SourceOverride | None
) -> PackageJobs:
    by_id = {p.id: p for p in packages_of(matrix)}
    return PackageJobs(matrix, [by_id[key] for key in dict.fromkeys(key for key, _ in wanted) if key in by_id])
