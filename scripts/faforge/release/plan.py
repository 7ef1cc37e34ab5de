"""What CI must build: the matrix minus what the channel holds, as GitHub Actions matrix jobs.

The kernels are built once per kernel package (libflash-attn-kernels, one per platform, CUDA, arch
list and Philox layout: faforge.matrix.kernels), never per cell; each cell's job then compiles only flash_api.cpp and
links it against its kernel package, which it takes from this run's artifacts or from the channel.
So a plan has five stages, each a list of chunks; the first three run one after the other, and so do the last two:

- `kernels`: a whole kernel package per job, or the TU pieces of one too long for a hosted job
  (variants/build-cost.yaml: 6 hours), each filling its compiler cache;
- `kernel_links`: the final job of each split kernel package, which restores its pieces' caches,
  links the library and packages it;
- `flash_attn`: one job per cell, making its flash-attn package, after its kernel package exists;
- `flash_attn_3_pieces`: the TU pieces of each FlashAttention-3 package too long for a hosted job, each
  filling the package's compiler cache, as a kernel package's pieces do;
- `flash_attn_3`: one job per FlashAttention-3 package (faforge.families.flash_attn_3.matrix: one per platform,
  CUDA and arch list, serving a range of torch minors through the stable ABI), built whole from
  recipes/flash-attn-3 and its generated variant file, after its pieces when it has them (then with their
  objects in the compiler cache, as a kernels-link job); it needs no kernel package, so these two stages
  run beside the others;
- `wheels`: one job per pip cell (the pip world: faforge.release.pip_plan), after the kernel stages: the cell's
  glue wheel (flash_api.cpp against its PyPI torch, linked against its kernel package: this run's or the
  channel's) and the kernel wheel (that package's library, only its RUNPATH set); a kernel key only pip
  cells have is an ordinary kernel package of the first two stages.

GitHub allows at most 256 jobs per matrix, so each stage comes in chunks of at most
`max_jobs_per_matrix`. A kernel package is built only when a cell to build needs it and the channel
does not already hold it.

A package counts as held only under its exact build string, whose hash covers the digests of its
inputs (faforge.matrix.inputs). One the channel holds under the same build string but another hash
was built from other inputs (or another variant): the plan lists it as stale and builds it anew
(faforge.release.plan_held). Each job's matrix row is made by faforge.release.plan_jobs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.matrix.kernels import KernelPackage, kernel_key
from faforge.matrix.pip_builds import PipBuild
from faforge.matrix.render import RenderedCell
from faforge.matrix.render_packages import RenderedPackage as RenderedFa3
from faforge.release.cost import KERNELS_LINK_PART, BuildCost, Part, split_kernels
from faforge.release.pip_plan import PIP_STAGE, TorchReleaseCost, no_wheel_runner, wheel_part
from faforge.release.plan_held import kernel_build, kernel_in, stale_packages
from faforge.release.plan_jobs import FA3_PART, cell_job, fa3_job, fa3_parts, kernel_job, wheel_job

# 3: the flash_attn_3 stage and the flash_attn_3_packages list (FlashAttention-3 packages beside the cells).
# 4: the flash_attn_3_pieces stage (TU pieces of an FA3 package too long for one job) and FA3 jobs' `kernels`.
# 5: the `wheels` stage (one job per pip cell), `index`, `pip_cells`, `pip_in_index`, `pip_to_build`, `pip_not_built`
#    and `pip_cost`; a kernel job's cell may be a pip cell's (a kernel key only pip cells have).
PLAN_VERSION = 5
# The cells' own jobs come after the kernels, in the stage named after the family (the workflows read
# `flash_attn-N`); FlashAttention-3's packages in theirs (`flash_attn_3-N`).
CELL_STAGE = FLASH_ATTN.key
FA3_STAGE = FLASH_ATTN_3.key
FA3_PIECES_STAGE = f"{FA3_STAGE}_pieces"
STAGES = ("kernels", "kernel_links", CELL_STAGE, PIP_STAGE, FA3_PIECES_STAGE, FA3_STAGE)
# Stages an older plan lacks (version 2: no FA3, 3: no FA3 pieces, 4: no wheels); its other stages make it a plan.
LATER_STAGES = (FA3_STAGE, FA3_PIECES_STAGE, PIP_STAGE)


@dataclass(frozen=True)
class Plan:
    channel: str | None
    todo: list[RenderedCell]
    present: list[RenderedCell]
    kernels: list[KernelPackage]  # needed by the cells to build
    kernels_in_channel: set[str]  # ids of those the channel already holds
    stale: list[str]  # SUBDIR/FILE of packages the channel holds, built from other inputs, that this plan rebuilds
    jobs: dict[str, list[dict]]  # stage -> jobs
    chunk_size: int
    fa3: list[RenderedFa3] = field(default_factory=list)  # every FlashAttention-3 package of the planned platforms
    fa3_in_channel: frozenset[str] = frozenset()  # ids of those the channel holds (exact build), which no job builds
    pip: list[PipBuild] = field(default_factory=list)  # every pip cell of the planned platforms
    pip_in_index: frozenset[str] = frozenset()  # ids of those whose wheels the target index holds, which no job builds
    index: str | None = None  # the wheel index root read, as given
    pip_costs: list[TorchReleaseCost] = field(default_factory=list)  # what each torch release of a pip world adds
    wheel_job_minutes: int = 0
    wheel_platforms: frozenset[str] = frozenset()  # the platforms variants/build-cost.yaml gives a wheel runner

    @property
    def pip_todo(self) -> list[PipBuild]:
        return [b for b in self.pip if b.cell.id not in self.pip_in_index and b.cell.platform in self.wheel_platforms]

    @property
    def pip_left_out(self) -> list[PipBuild]:
        """Pip cells not in the index whose platform has no wheel runner, so no job can build them."""
        return [
            b for b in self.pip if b.cell.id not in self.pip_in_index and b.cell.platform not in self.wheel_platforms
        ]

    @property
    def fa3_todo(self) -> list[RenderedFa3]:
        return [r for r in self.fa3 if r.package.id not in self.fa3_in_channel]

    @property
    def runner_minutes(self) -> int:
        """The runner time the plan costs: every job's estimate (variants/build-cost.yaml), added up."""
        return sum(job["timeout-minutes"] for stage in STAGES for job in self.jobs[stage])

    def chunks(self, jobs: list[dict]) -> list[dict]:
        return [{"include": jobs[i : i + self.chunk_size]} for i in range(0, len(jobs), self.chunk_size)]

    def to_json(self) -> dict:
        todo = {r.cell.id for r in self.todo} | {b.cell.id for b in self.pip_todo}
        return {
            "version": PLAN_VERSION,
            "channel": self.channel,
            "index": self.index,
            "cells": len(self.todo) + len(self.present),
            "estimated_runner_minutes": self.runner_minutes,
            "in_channel": [r.cell.id for r in self.present],
            "to_build": [r.cell.id for r in self.todo],
            "stale": self.stale,
            "pip_cells": len(self.pip),
            "pip_in_index": [b.cell.id for b in self.pip if b.cell.id in self.pip_in_index],
            "pip_to_build": [b.cell.id for b in self.pip_todo],
            "pip_not_built": [{"id": b.cell.id, "why": no_wheel_runner(b.cell.platform)} for b in self.pip_left_out],
            "pip_cost": {
                "wheel_job_minutes": self.wheel_job_minutes,
                "per_torch_release": [c.as_json() for c in self.pip_costs],
            },
            "kernel_packages": [
                {
                    "id": k.key.id,
                    "name": k.name,
                    "version": k.version,
                    "build_string_prefix": k.key.build_string_prefix,
                    "in_channel": k.key.id in self.kernels_in_channel,
                    "cells": [c for c in k.cell_ids if c in todo]
                    + [b.cell.id for b in self.pip_todo if kernel_key(b.cell) == k.key],
                }
                for k in self.kernels
            ],
            f"{FA3_STAGE}_packages": [
                {**r.to_json(), "in_channel": r.package.id in self.fa3_in_channel} for r in self.fa3
            ],
            **{stage: self.chunks(self.jobs[stage]) for stage in STAGES},
        }


def make_plan(
    rendered: list[RenderedCell],
    kernels: list[KernelPackage],
    cost: BuildCost,
    present: set[tuple[str, str, str, str]],
    channel: str | None,
    fa3: Sequence[RenderedFa3] = (),
    fa3_pieces: Mapping[str, Sequence[Part]] | None = None,
    pip: Sequence[PipBuild] = (),
    pip_kernels: Sequence[KernelPackage] = (),
    pip_in_index: frozenset[str] = frozenset(),
    index: str | None = None,
    pip_costs: Sequence[TorchReleaseCost] = (),
) -> Plan:
    """`fa3_pieces`: each FA3 package's split_kernels jobs by id (faforge.families.flash_attn_3.cost), see fa3_parts. `pip`: the
    pip cells (faforge.matrix.pip_builds), `pip_kernels` the kernel packages only they need, `pip_in_index` the ids
    of those whose wheels the target index holds."""
    kernels_of = {cell_id: k for k in kernels for cell_id in k.cell_ids}
    todo: list[RenderedCell] = []
    done: list[RenderedCell] = []
    for r in rendered:
        package = r.recipe["package"]
        (
            done if (package["name"], str(package["version"]), r.build_string, r.cell.platform) in present else todo
        ).append(r)
    by_key = {k.key: k for k in [*kernels, *pip_kernels]}
    pip_todo = [b for b in pip if b.cell.id not in pip_in_index and b.cell.platform in cost.wheel_runners]
    pip_kernel_of = {b.cell.id: by_key[kernel_key(b.cell)] for b in pip}
    needed = [
        k
        for k in by_key.values()
        if any(kernels_of[r.cell.id] == k for r in todo) or any(pip_kernel_of[b.cell.id] == k for b in pip_todo)
    ]
    # The exact build: the conda cells' pins (their renders), else the one the pip cells of the key pin.
    builds = {
        k.key.id: kernel_build(k, todo) or next((b.kernel_build for b in pip if pip_kernel_of[b.cell.id] == k), None)
        for k in needed
    }
    in_channel = {k.key.id for k in needed if kernel_in(k, present, builds[k.key.id])}
    jobs: dict[str, list[dict]] = {stage: [] for stage in STAGES}
    for k in needed:
        if k.key.id in in_channel:
            continue
        # The cell whose render the kernel job builds: a conda cell of the key (to build first), else the key's
        # first pip cell (`faforge build PIP_CELL --part kernels` renders the kernel output from its pip world).
        first = next((r for r in [*todo, *done] if kernels_of[r.cell.id] == k), None) or next(
            b for b in pip if pip_kernel_of[b.cell.id] == k
        )
        runner = cost.runner_for(k.key.platform)
        parts = split_kernels(cost, k.key.platform, k.key.cuda_archs)
        for part in parts:
            if part.name == KERNELS_LINK_PART:
                jobs["kernel_links"].append(kernel_job(first, k, part, runner.label, pieces=len(parts) - 1))
            else:
                jobs["kernels"].append(kernel_job(first, k, part, runner.label))
    for r in todo:
        k = kernels_of[r.cell.id]
        jobs[CELL_STAGE].append(cell_job(r, k, cost.runner_for(r.cell.platform).label, cost, k.key.id in in_channel))
    for b in pip_todo:
        k = pip_kernel_of[b.cell.id]
        jobs[PIP_STAGE].append(
            wheel_job(
                b, k, runner=cost.wheel_runners[b.cell.platform], cost=cost, kernel_in_channel=k.key.id in in_channel
            )
        )
    fa3_held = frozenset(
        r.package.id for r in fa3 if (r.name, r.version, r.build_string, r.package.platform) in present
    )
    fa3_todo = [r for r in fa3 if r.package.id not in fa3_held]
    for fa in fa3_todo:
        runner = cost.runner_for(fa.package.platform)
        parts = fa3_parts(cost, fa.package, (fa3_pieces or {}).get(fa.package.id, ()))
        for part in parts:
            if part.name == FA3_PART:
                jobs[FA3_STAGE].append(fa3_job(fa, runner.label, part, pieces=len(parts) - 1))
            else:
                jobs[FA3_PIECES_STAGE].append(fa3_job(fa, runner.label, part))
    stale = stale_packages([*todo, *fa3_todo], [k for k in needed if k.key.id not in in_channel], builds, present)
    return Plan(
        channel=channel,
        todo=todo,
        present=done,
        kernels=needed,
        kernels_in_channel=in_channel,
        stale=stale,
        jobs=jobs,
        chunk_size=cost.max_jobs_per_matrix,
        fa3=list(fa3),
        fa3_in_channel=fa3_held,
        pip=list(pip),
        pip_in_index=frozenset(pip_in_index),
        index=index,
        pip_costs=list(pip_costs),
        wheel_job_minutes=wheel_part(cost).minutes,
        wheel_platforms=frozenset(cost.wheel_runners),
    )
