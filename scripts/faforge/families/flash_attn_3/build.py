"""FlashAttention-3's build stage (faforge.release.build.stage.BuildFamily): its ids are the matrix's packages
(platform/cu<CUDA>/sm<archs>), each built whole or one TU piece at a time, as `faforge plan` split it, from
recipes/flash-attn-3 and its platform's generated variant file."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from faforge.costmodel.runners import BuildCost, Part, load_build_cost
from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.matrix import Fa3Package, packages_of
from faforge.families.flash_attn_3.plan import FA3_PART, fa3_parts, piece_estimates
from faforge.families.flash_attn_3.render import recipe, render
from faforge.family import FLASH_ATTN_3
from faforge.matrix import Matrix
from faforge.matrix.render import SourceOverride, recipe_file
from faforge.release.build.pip import WheelBuild
from faforge.release.build.stage import Batch, BuildRequest, BuildWhere, BuildWords
from faforge.release.build.steps import CellBuild, build_step, piece_env
from faforge.release.reporter import Reporter

# A package id as faforge.families.flash_attn_3.matrix spells it: platform/cu<CUDA>/sm<archs>.
PACKAGE_ID = re.compile(r"(linux-64|linux-aarch64)/cu\d+/sm[0-9a-z_]+")
NAME = FLASH_ATTN_3.package
# Each package's piece jobs by id, given the packages and the runners' costs.
Estimator = Callable[[list[Fa3Package], BuildCost], Mapping[str, Sequence[Part]]]

words = BuildWords(
    ids=(f"{NAME} package ids as `faforge matrix --fa3` does",),
    parts=(f"a {NAME} package's piece such as sm90_fwd-1of2",),
    whole=(f"{NAME} package",),
    source=f"{NAME} packages from this source tarball instead of the recipe's git commit",
    listing=f"`faforge matrix --fa3` every {NAME} package",
    named=f"{NAME} packages (`faforge matrix --fa3`)",
    built=f"{NAME} packages",
    about=(
        "A FlashAttention-3 package id (`faforge matrix --fa3`: platform/cu<CUDA>/sm<archs>) builds that package "
        f"whole from {FLASH_ATTN_3.recipe_dir} and its platform's generated variant file."
    ),
)


def owns(matrix: Matrix, key: str) -> bool:
    return any(p.id == key for p in packages_of(matrix))


def refusal(matrix: Matrix, key: str) -> str | None:
    """A package id the matrix lacks: which it has."""
    if not PACKAGE_ID.fullmatch(key):
        return None
    ids = [p.id for p in packages_of(matrix)]
    return f"{key}: no {NAME} package of the matrix has this id (it has {', '.join(ids) or 'none'})"


def example(matrix: Matrix) -> str | None:
    return f"a {NAME} package id (e.g. {packages_of(matrix)[0].id})" if packages_of(matrix) else None


def package_jobs(
    matrix: Matrix, wanted: list[tuple[str, str]], estimate: Estimator | None = piece_estimates
) -> list[tuple[Fa3Package, str, tuple[str, ...]]]:
    """The package jobs among the wanted ones, each once, in order: (package, part, the piece's TUs or () for
    `all`), the pieces as faforge plan split the package (fa3_parts over `estimate`, the plan's piece_estimates;
    None: each package one job)."""
    by_id = {p.id: p for p in packages_of(matrix)}
    asked = list(dict.fromkeys((key, part) for key, part in wanted if key in by_id))
    split = [by_id[key] for key, part in asked if part != FA3_PART]
    cost = load_build_cost() if split else None
    estimates = estimate(split, cost) if cost is not None and estimate else {}
    jobs: list[tuple[Fa3Package, str, tuple[str, ...]]] = []
    for key, part in asked:
        package = by_id[key]
        if part == FA3_PART:
            jobs.append((package, part, ()))
            continue
        assert cost is not None  # loaded above for every package asked for in pieces (`split`)
        pieces = [p for p in fa3_parts(cost, package, estimates.get(key, ())) if p.tus]
        piece = next((p for p in pieces if p.name == part), None)
        if piece is None:
            raise FaforgeError(
                f"--part {part}: {key} is a {NAME} package without such a piece",
                hint=f"its pieces are {', '.join(p.name for p in pieces)}, then {FA3_PART}"
                if pieces
                else f"it fits one job on its runner (variants/build-cost.yaml): --part {FA3_PART} (the default)",
            )
        jobs.append((package, part, piece.tus))
    return jobs


@dataclass(frozen=True)
class PackageJobs:
    """This run's packages (faforge.release.build.stage.FamilyJobs), each from the recipe and its variant file."""

    matrix: Matrix
    jobs: list[tuple[Fa3Package, str, tuple[str, ...]]]
    source: SourceOverride | None

    @property
    def from_recipe(self) -> bool:
        return bool(self.jobs)

    def batches(self, where: BuildWhere, stack: ExitStack) -> list[Batch]:
        if not self.jobs:
            return []
        recipe_path = stack.enter_context(recipe_file(recipe(self.matrix.variants_dir), self.source))
        return [Batch(len(self.jobs), lambda report, first, total: self._run(recipe_path, where, report, first, total))]

    def _run(
        self, recipe_path: Path, where: BuildWhere, report: Reporter, first: int, total: int
    ) -> list[CellBuild | WheelBuild]:
        results: list[CellBuild | WheelBuild] = []
        for i, (package, part, tus) in enumerate(self.jobs, first):
            piece_env(tus)
            rendered = render([package], recipe_path, self.matrix.variants_dir)[0]
            title = f"[{i}/{total}] {NAME} {package.id}" + ("" if part == FA3_PART else f" [{part}]")
            results.append(build_step(title, rendered, report, part=part, tus=tus, **vars(where)))
        return results


def jobs(
    matrix: Matrix, wanted: list[tuple[str, str]], request: BuildRequest, source: SourceOverride | None
) -> PackageJobs:
    return PackageJobs(matrix=matrix, jobs=package_jobs(matrix, wanted), source=source)
