"""flash-attn 4's part of `faforge plan` (faforge.release.plan.stage.PlanFamily). STUB."""

from __future__ import annotations

from dataclasses import dataclass

from faforge.costmodel.runners import BuildCost
from faforge.costmodel.samples import Measurements
from faforge.costmodel.section import CostSection
from faforge.matrix import Matrix
from faforge.release.plan.stage import FamilyPlan, Holdings

stages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fa4Wanted:
    names: tuple[str, ...] = ()
    platforms: frozenset[str] = frozenset()

    def plan(self, holdings: Holdings) -> FamilyPlan:
        return FamilyPlan(stages={})


def wanted(matrix: Matrix, platform: str) -> Fa4Wanted:
    return Fa4Wanted()


def cost_section(measurements: Measurements, matrix: Matrix, build_cost: BuildCost) -> CostSection | None:
    return None
