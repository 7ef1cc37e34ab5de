"""FlashAttention-4's part of `faforge plan` (faforge.release.plan.stage.PlanFamily): one stage, one job per package.

Its packages (faforge.families.flash_attn_4.matrix: one noarch package per known-good set) repack upstream's wheel
with the set's run pins; nothing compiles, so there are no pieces, no compiled objects and no cost model: a job is
the runner's setup (the solve and downloads of the recipe's import test). The channel files them under `noarch`,
so that is the subdir the plan reads and where a package counts as held or stale.

The recipes its import test needs from our channel (recipes/quack-kernels, recipes/apache-tvm-ffi) have no
`faforge build` id, so the plan gives them no job: its text names them (`--extra-channel` of the build).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from faforge.costmodel.runners import BuildCost
from faforge.costmodel.samples import Measurements
from faforge.costmodel.section import CostSection
from faforge.families.flash_attn_4.build import rows_of
from faforge.families.flash_attn_4.matrix import Fa4Package
from faforge.family import FLASH_ATTN_4
from faforge.matrix import Matrix
from faforge.matrix.render_packages import RenderedPackage
from faforge.release.plan.jobs import job_slug, package_filename
from faforge.release.plan.stage import FamilyPlan, Holdings, Present
from faforge.table import format_table

STAGE = FLASH_ATTN_4.key
stages = (STAGE,)
SUBDIR = "noarch"  # the channel's subdir of every package (recipes/flash-attn-4 is `noarch: python`)
PART = "all"  # `faforge build ID` builds the whole package, its default part
DEPENDENCY_RECIPES = ("recipes/apache-tvm-ffi", "recipes/quack-kernels")  # in build order: quack needs tvm-ffi
NAME = FLASH_ATTN_4.package
# A noarch build string: its set, then `py`, rattler-build's hash and the build number (torch2.11_cu130_pyhe059897_0).
# held.stale_packages's head (`_h<hash>_N`) does not split it, so a package built from other inputs is found here.
NOARCH_HASH = re.compile(r"^(?P<head>.+)_pyh[0-9a-f]+_\d+$")


def job(rendered: RenderedPackage[Fa4Package], cost: BuildCost) -> dict:
    """A package's job: `faforge build ID` on its build platform's runner, timed as the runner's setup alone."""
    package = rendered.package
    return {
        "cell": package.id,
        "part": PART,
        "slug": f"{NAME}-{job_slug(package.id, PART)}",
        "name": f"{NAME} {package.id}",
        "platform": SUBDIR,
        "runs-on": cost.runner_for(package.platform).label,
        "timeout-minutes": round(cost.setup_minutes * cost.safety_factor),
        "python": package.python[-1],
        "torch": package.torch,
        "cuda": package.cuda,
        "build-string": rendered.build_string,
        "package": package_filename(rendered),
        "pieces": 0,
    }


def _head(build_string: str) -> str:
    match = NOARCH_HASH.match(build_string)
    return match["head"] if match else build_string


def stale(todo: Iterable[RenderedPackage[Fa4Package]], present: Present) -> frozenset[str]:
    """What the channel's noarch subdir holds of a package to build under its set's head with another hash."""
    return frozenset(
        f"{SUBDIR}/{name}-{version}-{build}.conda"
        for r in todo
        for name, version, build, subdir in present
        if (name, version, subdir) == (r.name, r.version, SUBDIR)
        and build != r.build_string
        and _head(build) == _head(r.build_string)
    )


def _table(listing: list[dict]) -> tuple[str, ...]:
    rows = [[p["id"], p["build_string"], "in the channel" if p["in_channel"] else "to build"] for p in listing]
    return (format_table([f"{NAME} package", "build string", "status"], rows) + "\n",) if rows else ()


@dataclass(frozen=True)
class Packages:
    """The FA4 packages the planned platform builds, rendered."""

    rendered: list[RenderedPackage[Fa4Package]]
    names: tuple[str, ...] = (NAME,)

    @property
    def platforms(self) -> frozenset[str]:
        return frozenset({SUBDIR}) if self.rendered else frozenset()

    def plan(self, holdings: Holdings) -> FamilyPlan:
        held = frozenset(
            r.package.id for r in self.rendered if (r.name, r.version, r.build_string, SUBDIR) in holdings.present
        )
        todo = [r for r in self.rendered if r.package.id not in held]
        listing = [{**r.to_json(), "in_channel": r.package.id in held} for r in self.rendered]
        where = holdings.channel or "no channel"
        return FamilyPlan(
            stages={STAGE: [job(r, holdings.cost) for r in todo]},
            listings={f"{STAGE}_packages": listing},
            stale=stale(todo, holdings.present),
            tables=_table(listing),
            lines=(f"{len(todo)} {NAME} packages to build, {len(held)} already in {where}",),
            notes=(
                f"{NAME}'s builds need {' and '.join(DEPENDENCY_RECIPES)} built first and passed as --extra-channel; "
                "the plan has no job for them (they have no `faforge build` id)",
            )
            if todo
            else (),
        )


def wanted(matrix: Matrix, platform: str) -> Packages:
    """Its packages built on `platform` (`all`: every one), rendered from the generated variant file."""
    return Packages(rendered=rows_of(matrix).render(platform))


def cost_section(measurements: Measurements, matrix: Matrix, build_cost: BuildCost) -> CostSection | None:
    return None  # nothing compiles: no TU to time
