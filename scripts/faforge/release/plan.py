"""What CI must build: the matrix minus what the channel holds, as GitHub Actions matrix jobs.

GitHub allows at most 256 jobs per matrix and 6 hours per hosted job (variants/build-cost.yaml),
so jobs come in chunks of at most `max_jobs_per_matrix`, and a cell whose estimated build is
longer than its runner's limit becomes TU pieces plus a final link job (faforge.release.cost).
Link jobs need their pieces, so they form a second list of chunks that runs afterwards.

Pieces are planned once per kernel cache key (faforge.buildcost.cachekey), not per cell: the
kernel objects do not depend on python (the recipe's ccache shares them, measured in
variants/README.md), so the cells that differ only in python share one set of piece jobs, and
each cell's link job restores their compiler caches.
"""

from __future__ import annotations

from dataclasses import dataclass

from faforge.buildcost.cachekey import kernel_cache_key
from faforge.matrix.render import RenderedCell
from faforge.release.cost import BuildCost, Part, split_cell

PLAN_VERSION = 1


@dataclass(frozen=True)
class Plan:
    channel: str | None
    todo: list[RenderedCell]
    present: list[RenderedCell]
    build_jobs: list[dict]
    link_jobs: list[dict]
    chunk_size: int

    def chunks(self, jobs: list[dict]) -> list[dict]:
        return [{"include": jobs[i:i + self.chunk_size]} for i in range(0, len(jobs), self.chunk_size)]

    def to_json(self) -> dict:
        return {
            "version": PLAN_VERSION,
            "channel": self.channel,
            "cells": len(self.todo) + len(self.present),
            "in_channel": [r.cell.id for r in self.present],
            "to_build": [r.cell.id for r in self.todo],
            "build": self.chunks(self.build_jobs),
            "link": self.chunks(self.link_jobs),
        }


def package_filename(rendered: RenderedCell) -> str:
    package = rendered.recipe["package"]
    return f"{package['name']}-{package['version']}-{rendered.build_string}.conda"


def job_slug(cell_id: str, part: str) -> str:
    """A name safe for artifact and log files: linux-64-py312-torch2.7-cu129-abi1[-bwd-1of2]."""
    slug = cell_id.replace("/", "-")
    return slug if part == "all" else f"{slug}-{part}"


def matrix_entry(rendered: RenderedCell, part: Part, runner_label: str, pieces: int = 0) -> dict:
    """One job. A piece job builds its TUs for the kernel set; `cell` is the set's first cell.
    `pieces` is how many piece artifacts a link job must find before it builds."""
    cell = rendered.cell
    kernels = kernel_cache_key(cell)
    piece = part.name not in ("all", "link")
    return {
        "cell": cell.id,
        "part": part.name,
        "slug": f"{kernels}-{part.name}" if piece else job_slug(cell.id, part.name),
        "kernels": kernels,
        "name": f"{kernels} [{part.name}]" if piece else cell.id if part.name == "all" else f"{cell.id} [{part.name}]",
        "platform": cell.platform,
        "runs-on": runner_label,
        "timeout-minutes": part.minutes,
        "python": cell.python,
        "torch": cell.torch,
        "cuda": cell.cuda,
        "cxx11-abi": cell.cxx11_abi,
        "build-string": rendered.build_string,
        "package": package_filename(rendered),
        "pieces": pieces,
    }


def present_keys(records) -> set[tuple[str, str, str, str]]:
    """(name, version, build string, subdir) of each record a channel holds."""
    return {(r.name.normalized, str(r.version), str(r.build), str(r.subdir)) for r in records}


def make_plan(rendered: list[RenderedCell], cost: BuildCost, present: set[tuple[str, str, str, str]], channel: str | None) -> Plan:
    todo, done, build_jobs, link_jobs = [], [], [], []
    planned_pieces = set()
    for r in rendered:
        package = r.recipe["package"]
        if (package["name"], str(package["version"]), r.build_string, r.cell.platform) in present:
            done.append(r)
            continue
        todo.append(r)
        runner = cost.runner_for(r.cell.platform)
        parts = split_cell(cost, r.cell.platform, r.cell.cuda_archs)
        for part in parts:
            if part.name == "link":
                link_jobs.append(matrix_entry(r, part, runner.label, pieces=len(parts) - 1))
            elif part.name == "all" or (kernel_cache_key(r.cell), part.name) not in planned_pieces:
                planned_pieces.add((kernel_cache_key(r.cell), part.name))
                build_jobs.append(matrix_entry(r, part, runner.label))
    return Plan(channel=channel, todo=todo, present=done, build_jobs=build_jobs, link_jobs=link_jobs,
                chunk_size=cost.max_jobs_per_matrix)
