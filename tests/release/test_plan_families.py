"""The plan asks each family it is handed for its part (faforge.release.plan.stage.PlanFamily): a family the plan has
never heard of, shaped as a pure-Python package repacked from a PyPI wheel (no kernels, no pieces, no wheels to
build), gets its own stage, listing and stale packages with no change to the plan."""

from __future__ import annotations

from dataclasses import dataclass

from faforge import progress
from faforge.costmodel.runners import load_build_cost
from faforge.release.plan.stage import FamilyPlan, Holdings, jobs_in_plan, make_plan

HELD = ("pure-attn", "4.0.0", "pyhd8ed1ab_0", "noarch")


@dataclass(frozen=True)
class PurePython:
    """A noarch family: one repack job unless the channel holds its package; an older build of it is stale."""

    stage: str
    names: tuple[str, ...] = ("pure-attn",)
    platforms: frozenset[str] = frozenset({"noarch"})

    def plan(self, holdings: Holdings) -> FamilyPlan:
        held = HELD in holdings.present
        job = {"cell": "noarch/pure-attn", "part": "repack", "timeout-minutes": 7}
        return FamilyPlan(
            stages={self.stage: [] if held else [job]},
            listings={f"{self.stage}_packages": [{"id": "noarch/pure-attn", "in_channel": held}]},
            stale=frozenset() if held else frozenset({"noarch/pure-attn-4.0.0-pyhd8ed1ab_old.conda"}),
        )


def holdings(present: set) -> Holdings:
    return Holdings(present=present, cost=load_build_cost(), channel="c", index=None, report=progress)


def test_a_new_family_brings_its_stage_listing_and_stale_packages():
    wanted = [PurePython("pure_b"), PurePython("pure_a")]
    plan = make_plan(wanted, holdings(set()), "c")
    data = plan.to_json()
    assert plan.stages == ("pure_b", "pure_a"), "the families' order, not the names'"
    assert list(data) == [
        "version",
        "channel",
        "index",
        "estimated_runner_minutes",
        "stale",
        "pure_b_packages",
        "pure_a_packages",
        "pure_b",
        "pure_a",
    ]
    assert data["estimated_runner_minutes"] == 14
    assert data["stale"] == ["noarch/pure-attn-4.0.0-pyhd8ed1ab_old.conda"], "each stale package once, sorted"
    assert [j["part"] for j in jobs_in_plan(data)] == ["repack", "repack"]
    held = make_plan(wanted[:1], holdings({HELD}), "c").to_json()
    assert held["pure_b"] == [] and held["stale"] == [] and held["pure_b_packages"][0]["in_channel"]


def test_a_plan_file_is_read_by_its_stages_whichever_families_wrote_it():
    job = {"cell": "a", "part": "cell"}
    assert jobs_in_plan({"version": 5, "kernel_packages": [{"id": "k"}], "x": [{"include": [job]}]}) == [job]
    assert jobs_in_plan({"version": 5, "x": []}) == [], "a plan with nothing to build is still a plan"
    assert jobs_in_plan({"cell": "a"}) is None and jobs_in_plan({"include": [job]}) is None
