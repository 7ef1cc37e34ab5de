"""flash-attn 2's part of `faforge plan` (faforge.release.plan.stage.PlanFamily): its kernel packages, its cells and its
pip cells.

The kernels are built once per kernel package (libflash-attn-kernels, one per platform, CUDA, arch list and
Philox layout: faforge.matrix.kernels), never per cell; each cell's job then compiles only flash_api.cpp and
links it against its kernel package, which it takes from this run's artifacts or from the channel. Its stages:

- `kernels`: a whole kernel package per job, or the TU pieces of one too long for a hosted job
  (variants/build-cost.yaml: 6 hours), each filling its compiler cache;
- `kernel_links`: the final job of each split kernel package, which restores its pieces' caches,
  links the library and packages it;
- `flash_attn`: one job per cell, making its flash-attn package, after its kernel package exists
  (the workflows read `flash_attn-N`);
- `wheels`: one job per pip cell (the pip world: faforge.release.plan.pip), after the kernel stages: the cell's
  glue wheel and the kernel wheel; a kernel key only pip cells have is an ordinary kernel package of the first
  two stages.

A kernel package is built only when a cell to build needs it and the channel does not already hold it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge.costmodel.runners import KERNELS_LINK_PART, BuildCost, split_kernels
from faforge.costmodel.samples import Measurements
from faforge.families.flash_attn import plan_text
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix
from faforge.matrix.inputs import KERNEL_INPUTS, objects_digests
from faforge.matrix.kernels import FLASH_ATTN_PACKAGE, KERNEL_PACKAGE, KernelPackage, kernel_key
from faforge.matrix.pip_builds import PipBuild, pip_builds
from faforge.matrix.render import RenderedCell
from faforge.matrix.render_cache import selected_cells
from faforge.release.plan.held import kernel_build, kernel_in, stale_kernels, stale_packages
from faforge.release.plan.jobs import cell_job, kernel_job, wheel_job
from faforge.release.plan.pip import PIP_STAGE, added_per_torch_release, index_holdings, no_wheel_runner, wheel_part
from faforge.release.plan.reuse import CompiledStages, objects_keys
from faforge.release.plan.stage import FamilyPlan, Holdings, Present
from faforge.release.reporter import Reporter

CELL_STAGE = FLASH_ATTN.key
stages = ("kernels", "kernel_links", CELL_STAGE, PIP_STAGE)


def pip_in_index(index: str, builds: Sequence[PipBuild], report: Reporter) -> frozenset[str]:
    """The ids of the pip cells whose two wheels the index root `index` (a folder or a URL) already lists."""
    holdings = index_holdings(index, {b.cell.index_name for b in builds})
    if holdings.missing:
        report.say(
            f"faforge plan: {len(holdings.missing)} of the "
            f"{len(holdings.missing) + len(holdings.files)} indexes are not in "
            f"{index} yet (nothing published there): {' '.join(holdings.missing)}"
        )
    return frozenset(b.cell.id for b in builds if holdings.holds(b))


def _split(rendered: list[RenderedCell], present: Present) -> tuple[list[RenderedCell], list[RenderedCell]]:
    """The cells to build and those the channel holds under their exact build string."""
    todo: list[RenderedCell] = []
    done: list[RenderedCell] = []
    for r in rendered:
        package = r.recipe["package"]
        key = (package["name"], str(package["version"]), r.build_string, r.cell.platform)
        (done if key in present else todo).append(r)
    return todo, done


# The variant values a kernel package's objects follow, besides its slug's: the recipe's kernel output reads only
# these (faforge.matrix.kernels says why).
KERNEL_VARIANT_KEYS = (
    "cuda_compiler_version",
    "cuda_archs",
    "philox_offset_bits",
    "c_compiler_version",
    "cxx_compiler_version",
    "c_stdlib_version",
)


@dataclass(frozen=True)
class Cells:
    """The cells, pip cells and kernel packages of the planned platforms."""

    rendered: list[RenderedCell]
    kernels: list[KernelPackage]
    pip: list[PipBuild]
    pip_kernels: list[KernelPackage]  # the kernel packages only pip cells need
    root: Path  # the checkout whose build inputs the objects key digests (faforge.matrix.inputs.objects_digests)
    names: tuple[str, ...] = (FLASH_ATTN_PACKAGE, KERNEL_PACKAGE)

    @property
    def platforms(self) -> frozenset[str]:
        return frozenset(r.cell.platform for r in self.rendered)

    def plan(self, holdings: Holdings) -> FamilyPlan:
        cost, present, pip = holdings.cost, holdings.present, self.pip
        in_index = frozenset() if holdings.index is None else pip_in_index(holdings.index, pip, holdings.report)
        kernels_of = {cell_id: k for k in self.kernels for cell_id in k.cell_ids}
        todo, done = _split(self.rendered, present)
        by_key = {k.key: k for k in [*self.kernels, *self.pip_kernels]}
        pip_todo = [b for b in pip if b.cell.id not in in_index and b.cell.platform in cost.wheel_runners]
        pip_left_out = [b for b in pip if b.cell.id not in in_index and b.cell.platform not in cost.wheel_runners]
        pip_kernel_of = {b.cell.id: by_key[kernel_key(b.cell)] for b in pip}
        needed = [
            k
            for k in by_key.values()
            if any(kernels_of[r.cell.id] == k for r in todo) or any(pip_kernel_of[b.cell.id] == k for b in pip_todo)
        ]
        # The exact build: the conda cells' pins (their renders), else the one the pip cells of the key pin.
        builds = {
            k.key.id: kernel_build(k, todo)
            or next((b.kernel_build for b in pip if pip_kernel_of[b.cell.id] == k), None)
            for k in needed
        }
        in_channel = {k.key.id for k in needed if kernel_in(k, present, builds[k.key.id])}
        jobs: dict[str, list[dict]] = {stage: [] for stage in stages}
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
            label = cost.runner_for(r.cell.platform).label
            jobs[CELL_STAGE].append(cell_job(r, k, label, cost, k.key.id in in_channel))
        for b in pip_todo:
            k = pip_kernel_of[b.cell.id]
            runner_of = cost.wheel_runners[b.cell.platform]
            jobs[PIP_STAGE].append(
                wheel_job(b, k, runner=runner_of, cost=cost, kernel_in_channel=k.key.id in in_channel)
            )
        to_build = [k for k in needed if k.key.id not in in_channel]
        stale = stale_packages(todo, present) | stale_kernels(to_build, builds, present)
        todo_ids = {r.cell.id for r in todo} | {b.cell.id for b in pip_todo}
        kernel_listing = [
            {
                "id": k.key.id,
                "name": k.name,
                "version": k.version,
                "build_string_prefix": k.key.build_string_prefix,
                "in_channel": k.key.id in in_channel,
                "cells": [c for c in k.cell_ids if c in todo_ids]
                + [b.cell.id for b in pip_todo if kernel_key(b.cell) == k.key],
            }
            for k in needed
        ]
        listings = {
            "pip_cells": len(pip),
            "pip_in_index": [b.cell.id for b in pip if b.cell.id in in_index],
            "pip_to_build": [b.cell.id for b in pip_todo],
            "pip_not_built": [{"id": b.cell.id, "why": no_wheel_runner(b.cell.platform)} for b in pip_left_out],
            "pip_cost": {
                "wheel_job_minutes": wheel_part(cost).minutes,
                "per_torch_release": [c.as_json() for c in added_per_torch_release(pip, self.kernels, cost)],
            },
            "kernel_packages": kernel_listing,
        }
        where = holdings.channel or "no channel"
        counts = (len(jobs[CELL_STAGE]), len(jobs["kernels"]), len(jobs["kernel_links"]))
        cells = {r.cell.id: r.cell for r in self.rendered} | {b.cell.id: b.cell for b in pip}
        digest = objects_digests(self.root)[KERNEL_INPUTS] if holdings.objects else ""
        compiled = (CompiledStages("kernels", "kernel_links", digest, KERNEL_VARIANT_KEYS),)
        return FamilyPlan(
            stages=jobs,
            compiled=compiled,
            objects=objects_keys(jobs, compiled, cells) if holdings.objects else {},
            head={"cells": len(todo) + len(done)},
            status={"in_channel": [r.cell.id for r in done], "to_build": [r.cell.id for r in todo]},
            listings=listings,
            stale=stale,
            tables=plan_text.kernel_table(kernel_listing),
            lines=(plan_text.summary(counts, len(todo), len(done), len(needed), len(in_channel), where),),
            notes=plan_text.pip_lines(listings, len(jobs[PIP_STAGE]), holdings.index),
        )


def wanted(matrix: Matrix, platform: str) -> Cells:
    """The platform's cells (`all`: every platform's), its pip cells and their kernel packages."""
    return Cells(
        rendered=selected_cells(matrix, platform),
        kernels=matrix.kernels,
        pip=pip_builds(matrix, platform),
        pip_kernels=[k for k in matrix.pip_kernels if platform in ("all", k.key.platform)],
        root=matrix.variants_dir.parent,
    )


def cost_section(measurements: Measurements, matrix: Matrix, build_cost: BuildCost) -> None:
    """None: flash-attn's costs are `faforge bench-build`'s own report (faforge.buildcost.extrapolate_report)."""
    return None
