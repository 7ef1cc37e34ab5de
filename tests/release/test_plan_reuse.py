"""A package whose objects CI holds is linked and packed, not compiled (faforge.release.plan.reuse)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.costmodel.runners import KERNELS_LINK_PART, KERNELS_PART
from faforge.family import FLASH_ATTN_3
from faforge.release.plan.reuse import CompiledStages, objects_key, objects_keys, read_cached, reuse_objects
from tests.matrix.test_inputs import append, copy_checkout, held_channel, identities, plan

COMPILERS = ("c_compiler_version", "c_stdlib_version")
STAGES = [
    CompiledStages("kernels", "kernel_links", "d" * 16, COMPILERS),
    CompiledStages("pieces", "whole", "e" * 16),
]


def job(slug: str, part: str, pieces: int = 0) -> dict:
    return {
        "kernels": slug,
        "cell": f"{slug}-cell",
        "part": part,
        "slug": f"{slug}-{part}",
        "name": f"{slug} [{part}]",
        "pieces": pieces,
    }


def plan_jobs() -> dict[str, list[dict]]:
    return {
        "kernels": [
            job("split", "fwd-1of2"),
            job("split", "fwd-2of2"),
            job("whole", KERNELS_PART),
            job("other", "bwd"),
        ],
        "kernel_links": [job("split", KERNELS_LINK_PART, pieces=2), job("other", KERNELS_LINK_PART, pieces=1)],
        "cells": [job("split", "cell")],
        "pieces": [job("pkg", "fwd")],
        "whole": [job("pkg", "all", pieces=1)],
    }


def test_without_cached_objects_the_plan_is_the_full_build():
    assert reuse_objects(plan_jobs(), STAGES, ()) == plan_jobs()


def test_cached_objects_leave_only_link_and_pack_jobs():
    out = reuse_objects(plan_jobs(), STAGES, {"split", "whole", "pkg"})
    assert out["kernels"] == [job("other", "bwd")], "no piece and no whole compile of a reused package"
    assert out["kernel_links"] == [
        job("split", KERNELS_LINK_PART),
        job("other", KERNELS_LINK_PART, pieces=1),
        job("whole", KERNELS_LINK_PART),
    ]
    assert out["pieces"] == [] and out["whole"] == [job("pkg", "all")]
    assert out["cells"] == plan_jobs()["cells"], "a cell's own job is no compiled package's"


def test_the_objects_key_follows_the_digest_and_the_compilers_only():
    class Cell:
        def __init__(self, **variant):
            self._variant = variant

        def variant(self):
            return self._variant

    jobs = {"kernels": [job("split", "fwd-1of2")], "kernel_links": [job("split", KERNELS_LINK_PART, pieces=1)]}
    first = Cell(python="3.12", torch_version="2.9.1", c_compiler_version="14", c_stdlib_version="2.28")
    other = Cell(python="3.10", torch_version="2.5.1", c_compiler_version="14", c_stdlib_version="2.28")
    newer = Cell(python="3.12", torch_version="2.9.1", c_compiler_version="15", c_stdlib_version="2.28")
    key = objects_keys(jobs, STAGES, {"split-cell": first})["split"]
    assert key.startswith("ccache-split-") and key == objects_key(
        "split", "d" * 16, {"c_compiler_version": "14", "c_stdlib_version": "2.28"}
    )
    assert objects_keys(jobs, STAGES, {"split-cell": other})["split"] == key, "the first cell's torch does not count"
    assert objects_keys(jobs, STAGES, {"split-cell": newer})["split"] != key
    assert objects_keys(
        jobs, [CompiledStages("kernels", "kernel_links", "f" * 16, COMPILERS)], {"split-cell": first}
    ) != {"split": key}


def test_the_cached_keys_are_read_one_a_line(tmp_path):
    listed = tmp_path / "cached"
    listed.write_text("ccache-a-1\n\n  ccache-b-2 \n")
    assert read_cached(listed) == {"ccache-a-1", "ccache-b-2"}


def generate(root: Path) -> None:
    env = dict(os.environ, FAFORGE_ROOT=str(root))
    done = subprocess.run([sys.executable, "-m", "faforge", "generate"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


def stage_jobs(data: dict, stage: str) -> list[dict]:
    return [job for chunk in data[stage] for job in chunk["include"]]


@pytest.mark.slow  # renders a scratch checkout's matrix with rattler-build and plans it three times
def test_a_checker_only_change_compiles_no_kernel_tu_when_the_objects_are_cached(tmp_path):
    """The plan CI runs after an edit of the shipped checker (abi/) alone, against a channel holding every package
    built before it: with the objects those builds saved in the cache, only link and pack jobs; without, the full
    build."""
    (tmp_path / "repo").mkdir()
    root = copy_checkout(tmp_path / "repo")
    cache = tmp_path / "cache"
    generate(root)  # the checkout's variant files, with today's digests
    held = identities(root)
    output = tmp_path / "github-output"
    before = plan(
        root,
        held_channel(root, tmp_path / "empty", {"cells": {}, "kernels": {}}),
        cache,
        "--github-output",
        str(output),
    )
    # What the jobs of that build saved their compiler caches under (build-cells.yml), as `gh cache list` lists them.
    line = next(line for line in output.read_text().splitlines() if line.startswith("objects="))
    cached = tmp_path / "cached-objects"
    cached.write_text("".join(f"{key}\n" for key in json.loads(line.removeprefix("objects=")).values()))
    fa3 = [(p["platform"], p["name"], p["version"], p["build_string"]) for p in before[f"{FLASH_ATTN_3.key}_packages"]]
    channel = held_channel(root, tmp_path / "channel", held, fa3)
    assert plan(root, channel, cache)["to_build"] == []

    append(root / "scripts/faforge/abi/check.py", "\n_A_CHECKER_EDIT = 1\n")
    generate(root)
    full = plan(root, channel, cache)
    reused = plan(root, channel, cache, "--cached-objects", str(cached))
    pieces, whole = f"{FLASH_ATTN_3.key}_pieces", FLASH_ATTN_3.key
    for name, data in (("without the cache", full), ("with the objects cached", reused)):
        print(f"\n{name}:")
        for stage in ("kernels", "kernel_links", pieces, whole):
            print(
                "\n".join(
                    f"  {stage:20} {j['name']} part={j['part']} pieces={j['pieces']}" for j in stage_jobs(data, stage)
                )
            )
    assert full["to_build"] == reused["to_build"] != [], "the checker ships in every package: all are repacked"
    assert all(not k["in_channel"] for k in full["kernel_packages"])
    assert stage_jobs(full, "kernels") and stage_jobs(full, pieces), "without the cache: every TU compiled"
    assert stage_jobs(reused, "kernels") == [] and stage_jobs(reused, pieces) == [], "no TU compiled"
    links = stage_jobs(reused, "kernel_links")
    assert {j["kernels"] for j in links} == {j["kernels"] for j in stage_jobs(full, "kernels")}
    assert all(j["part"] == KERNELS_LINK_PART and j["pieces"] == 0 for j in links)
    assert len(stage_jobs(reused, whole)) == len(stage_jobs(full, whole)) and all(
        j["pieces"] == 0 for j in stage_jobs(reused, whole)
    )
