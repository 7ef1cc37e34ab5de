"""Repacking from cached objects: a package whose object files CI already holds is linked and packed, not compiled.

A compiled package's build string follows all of its inputs, but its object files follow only its objects
digest (faforge.matrix.inputs.objects_digests: the compile inputs, the recipe's build part, its compilers).
An edit of what is packed around them (the checker, the recipe's tests) gives a new build string, so the plan
builds the package again, yet every object is the one built before.

How the objects survive between CI runs: the job that completes a package's compile (a whole kernel job, or
the link job after its pieces) saves its compiler cache under the key `ccache-<package slug>-<objects key>`
(.github/workflows/build-cells.yml; the plan hands each slug's key to the jobs as the `objects` output). The
plan job lists the keys the repository's cache holds (`gh cache list --key ccache-`) into a file that
`faforge plan --cached-objects FILE` reads. For a package whose key is listed, the plan keeps only the final
job, which restores that cache and builds with every TU a compiler-cache hit: no piece jobs, and a package
that fits one job becomes a link job. Without the file (or the key), the plan is the full build.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from faforge import paths
from faforge.costmodel.runners import KERNELS_LINK_PART, KERNELS_PART
from faforge.errors import FaforgeError

OBJECTS_CACHE = "ccache-"  # the prefix of the workflows' compiler-cache keys
KEY_CHARS = 16
MAX_KEY_CHARS = 512  # GitHub's own limit on a cache key
CACHE_KEY = re.compile(rf"[!-~]{{1,{MAX_KEY_CHARS}}}")
if TYPE_CHECKING:
    from faforge.release.plan.stage import Plan

P = TypeVar("P", bound="Plan")


@dataclass(frozen=True)
class CompiledStages:
    """A plan's two stages of one compiled output: its piece jobs (and whole builds), then the jobs that link
    and pack after them, with the objects digest of that output and the variant keys its objects follow (None:
    all of the variant of the cell or package a job names)."""

    pieces: str
    final: str
    objects_digest: str
    variant_keys: tuple[str, ...] | None = None


def compile_facts(cell: object, keys: tuple[str, ...] | None) -> dict:
    """What, besides its files, a package's objects follow: the variant values `keys` names of the cell or package
    its job builds from (its compilers, CUDA, archs: never the torch or python of a kernel package's first cell)."""
    variant = getattr(cell, "variant", None)
    values = variant() if callable(variant) else {}
    return {k: v for k, v in values.items() if keys is None or k in keys}


def objects_key(slug: str, digest: str, facts: Mapping) -> str:
    """The compiler-cache key of one package's objects: `ccache-<slug>-<16 hex>`."""
    material = json.dumps({"objects": digest, "facts": facts}, sort_keys=True, default=str)
    return f"{OBJECTS_CACHE}{slug}-{hashlib.sha256(material.encode()).hexdigest()[:KEY_CHARS]}"


def objects_keys(
    jobs: Mapping[str, Sequence[dict]], stages: Sequence[CompiledStages], cells: Mapping[str, object]
) -> dict[str, str]:
    """{package slug: objects key} of every compiled package the plan's jobs build; `cells` by id, the cell or
    package each job names."""
    keys: dict[str, str] = {}
    for stage in stages:
        for job in [*jobs.get(stage.pieces, ()), *jobs.get(stage.final, ())]:
            slug = job["kernels"]
            keys.setdefault(
                slug, objects_key(slug, stage.objects_digest, compile_facts(cells.get(job["cell"]), stage.variant_keys))
            )
    return keys


def _as_link(job: dict) -> dict:
    """A whole build whose objects are cached, as the link job of its package."""
    return {
        **job,
        "part": KERNELS_LINK_PART,
        "slug": job["slug"].removesuffix(KERNELS_PART) + KERNELS_LINK_PART,
        "name": job["name"].replace(f"[{KERNELS_PART}]", f"[{KERNELS_LINK_PART}]"),
        "pieces": 0,
    }


def reuse_objects(
    jobs: Mapping[str, Sequence[dict]], stages: Sequence[CompiledStages], reused: Iterable[str]
) -> dict[str, list[dict]]:
    """The plan's jobs with every package of `reused` (slugs whose objects are cached) linked and packed only:
    its piece jobs dropped, a whole build made its link job, its final job told to wait for no piece."""
    reused = frozenset(reused)
    out = {stage: list(stage_jobs) for stage, stage_jobs in jobs.items()}
    for stage in stages:
        kept, moved = [], []
        for job in out[stage.pieces]:
            if job["kernels"] not in reused:
                kept.append(job)
            elif job["part"] == KERNELS_PART:
                moved.append(_as_link(job))
        out[stage.pieces] = kept
        out[stage.final] = [
            {**job, "pieces": 0} if job["kernels"] in reused else job for job in out[stage.final]
        ] + moved
    return out


def read_cached(path: str | Path) -> frozenset[str]:
    """The cache keys a file lists, one a line (`gh cache list --key ccache- --json key --jq '.[].key'`): read
    through faforge.untrusted (capped, a FIFO or a folder refused), each line a printable key without spaces."""
    hint = "pass the keys `gh cache list --key ccache- --json key --jq '.[].key'` prints, one a line"
    text = paths.read_user_file(path, "--cached-objects", hint=hint, kind="cache list")
    keys = [line.strip() for line in text.splitlines() if line.strip()]
    bad = next((n for n, key in enumerate(keys, 1) if not CACHE_KEY.fullmatch(key)), None)
    if bad is not None:
        raise FaforgeError(
            f"--cached-objects {path}: key {bad} ({keys[bad - 1][:80]!r}) is not a cache key "
            f"(printable, no spaces, at most {MAX_KEY_CHARS} characters)",
            hint=hint,
            input=str(path),
        )
    return frozenset(keys)


def plan_reusing_objects(plan: P, cached: frozenset[str]) -> tuple[P, dict[str, str]]:
    """The plan with every package whose objects key is `cached` linked and packed only, and {slug: objects key}
    of every compiled package it builds (the workflows save and restore its compiler cache under that key). Each
    family's part of the plan says which of its stages compile and each package's key (FamilyPlan.compiled)."""
    keys = {slug: key for part in plan.parts for slug, key in part.objects.items()}
    reused = {slug for slug, key in keys.items() if key in cached}
    parts = tuple(
        dataclasses.replace(part, stages=reuse_objects(part.stages, part.compiled, reused)) for part in plan.parts
    )
    return dataclasses.replace(plan, parts=parts), keys
