"""What CI must build: each family's packages minus what the channel and the wheel index hold, as GitHub Actions
matrix jobs.

The plan asks each family it is handed (faforge.families.registry.FAMILIES, from faforge.commands.plan) through
its `plan` namespace (PlanFamily below): what it would build for the platform (`wanted`), then, given what the
channel and the index hold and what jobs cost (`Holdings`), its part of the plan (`FamilyPlan`): its stages in
order, each a list of jobs, its JSON listings and the packages the channel holds built from other inputs. A
family without kernels, pieces or wheels returns its one stage; nothing here knows which family it plans.

A plan's stages are its families' stages, in the order of the families and of each family's stages; the
workflows run them as their own jobs read them (`<stage>-N`). GitHub allows at most 256 jobs per matrix, so
each stage comes in chunks of at most `max_jobs_per_matrix` (variants/build-cost.yaml).

A package counts as held only under its exact build string, whose hash covers the digests of its inputs
(faforge.matrix.inputs). One the channel holds under the same build string but another hash was built from
other inputs (or another variant): the plan lists it as stale and builds it anew (faforge.release.plan.held).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from faforge.costmodel.runners import BuildCost
from faforge.costmodel.samples import Measurements
from faforge.costmodel.section import CostSection
from faforge.matrix import Matrix
from faforge.release.plan.reuse import CompiledStages
from faforge.release.reporter import Reporter

# The plan's schema version (tests/schemas/plan.json); `faforge build --plan` reads older ones too.
PLAN_VERSION = 5
Present = set[tuple[str, str, str, str]]  # (name, version, build string, subdir) of each package a channel holds


@dataclass(frozen=True)
class Holdings:
    """What a family's part is planned against: what the channel holds, what jobs cost, the wheel index root read
    (as given; None: none) and where the family says what it read."""

    present: Present
    cost: BuildCost
    channel: str | None  # the channel as given, for the summary lines
    index: str | None
    report: Reporter
    # Whether to key each compiled package's objects (faforge.release.plan.reuse): what `--github-output` and
    # `--cached-objects` need; a plan without them reads no build input (a checkout of variants/ alone plans).
    objects: bool = False


@dataclass(frozen=True)
class FamilyPlan:
    """One family's part of the plan. Its JSON keys go where the plan's schema has them: `head` before the runner
    estimate, `status` before `stale`, `listings` after it; its stages come after every family's listings.
    `tables` and `lines` are its part of `faforge plan`'s text (before and after the job table), `estimate` what
    its jobs' estimates rest on beside variants/build-cost.yaml, `notes` its lines after the estimate."""

    stages: dict[str, list[dict]]  # stage -> jobs, in the order the workflows run them
    head: dict = field(default_factory=dict)
    status: dict = field(default_factory=dict)
    listings: dict = field(default_factory=dict)
    stale: frozenset[str] = frozenset()  # SUBDIR/FILE the channel holds, built from other inputs, rebuilt here
    tables: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    estimate: str = ""
    notes: tuple[str, ...] = ()
    # Its compiled outputs' stages and each package's objects key (faforge.release.plan.reuse): a package whose
    # objects CI holds is linked and packed, not compiled.
    compiled: tuple[CompiledStages, ...] = ()
    objects: dict[str, str] = field(default_factory=dict)


class Wanted(Protocol):
    """What a family would build for the planned platforms, before the channel is read."""

    @property
    def names(self) -> tuple[str, ...]:
        """The conda package names the channel may hold of it."""
        ...

    @property
    def platforms(self) -> frozenset[str]:
        """The platforms of its packages (the channel's subdirs to read)."""
        ...

    def plan(self, holdings: Holdings) -> FamilyPlan: ...


class PlanFamily(Protocol):
    """A family's `plan` namespace (faforge.families.<name>.plan)."""

    @property
    def stages(self) -> tuple[str, ...]:
        """Its stages' names, in the order the workflows run them (`faforge plan --github-output` lists them)."""
        ...

    def wanted(self, matrix: Matrix, platform: str) -> Wanted:
        """Its packages for `platform` (`all`: every platform), rendered, as `faforge build` would build them."""
        ...

    def cost_section(self, measurements: Measurements, matrix: Matrix, build_cost: BuildCost) -> CostSection | None:
        """Its own section of `faforge bench-build`'s report (faforge.costmodel.section), or None."""
        ...


class PlannedFamily(Protocol):
    """A family module as the plan reads it (faforge.families.protocol.FamilyModule)."""

    @property
    def plan(self) -> PlanFamily: ...


@dataclass(frozen=True)
class Plan:
    channel: str | None
    index: str | None  # the wheel index root read, as given
    parts: tuple[FamilyPlan, ...]  # one per family, in the families' order
    chunk_size: int

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(stage for part in self.parts for stage in part.stages)

    @property
    def jobs(self) -> dict[str, list[dict]]:
        """Stage -> its jobs, every family's stages in order."""
        return {stage: jobs for part in self.parts for stage, jobs in part.stages.items()}

    @property
    def stale(self) -> list[str]:
        return sorted(frozenset().union(*(part.stale for part in self.parts)))

    @property
    def runner_minutes(self) -> int:
        """The runner time the plan costs: every job's estimate (variants/build-cost.yaml), added up."""
        return sum(job["timeout-minutes"] for jobs in self.jobs.values() for job in jobs)

    def chunks(self, jobs: list[dict]) -> list[dict]:
        return [{"include": jobs[i : i + self.chunk_size]} for i in range(0, len(jobs), self.chunk_size)]

    def to_json(self) -> dict:
        def merged(key: str) -> dict:
            return {k: v for part in self.parts for k, v in getattr(part, key).items()}

        return {
            "version": PLAN_VERSION,
            "channel": self.channel,
            "index": self.index,
            **merged("head"),
            "estimated_runner_minutes": self.runner_minutes,
            **merged("status"),
            "stale": self.stale,
            **merged("listings"),
            **{stage: self.chunks(jobs) for stage, jobs in self.jobs.items()},
        }


def channel_names(wanted: Iterable[Wanted]) -> list[str]:
    """The package names to read from the channel: every family's, each once."""
    return list(dict.fromkeys(name for w in wanted for name in w.names))


def make_plan(wanted: Sequence[Wanted], holdings: Holdings, channel: str | None, index: str | None = None) -> Plan:
    """The plan: each family's part against what the channel and the index hold, in the families' order."""
    return Plan(
        channel=channel,
        index=index,
        parts=tuple(w.plan(holdings) for w in wanted),
        chunk_size=holdings.cost.max_jobs_per_matrix,
    )


def jobs_in_plan(data: dict) -> list | None:
    """The jobs of a plan file's stages in its order (every list of `{"include": [...]}` chunks it has), whichever
    families and version wrote it; None when `data` is no plan: every plan `faforge plan` writes has its version."""
    if not isinstance(data.get("version"), int) or isinstance(data.get("version"), bool):
        return None
    stages = [
        value
        for value in data.values()
        if isinstance(value, list) and value and all(isinstance(c, dict) and "include" in c for c in value)
    ]
    return [job for chunks in stages for chunk in chunks for job in chunk["include"]]
