"""faforge.release.build_run's pure parts: which steps a build's jobs take, and reading a plan file's jobs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from faforge.errors import FaforgeError
from faforge.release.build_run import build_steps, jobs_from_plan
from faforge.release.plan_run import github_outputs


def cell(name: str, cuda: str = "12.9"):
    return SimpleNamespace(id=name, platform="linux-64", cuda=cuda, cuda_archs="80;90", philox_offset_bits=64)


def test_an_all_job_of_a_split_recipe_builds_its_kernel_package_once_per_key_then_the_cell():
    a, b, c = cell("a"), cell("b"), cell("c", cuda="13.0")
    steps = build_steps([(a, "all", ()), (b, "all", ()), (c, "all", ())], kernels_in_recipe=True)
    assert [(s[0].id, s[1]) for s in steps] == [("a", "kernels"), ("a", "cell"), ("b", "cell"), ("c", "kernels"), ("c", "cell")]


def test_named_parts_and_a_recipe_without_kernel_output_keep_their_jobs():
    a = cell("a")
    jobs = [(a, "all", ()), (a, "bwd-1of2", ("x.cu",))]
    assert build_steps(jobs, kernels_in_recipe=False) == jobs
    assert build_steps(jobs[1:], kernels_in_recipe=True) == jobs[1:]


def test_a_plan_a_chunk_and_a_job_each_give_their_jobs(tmp_path):
    job = {"cell": "a", "part": "cell"}
    shapes = {"plan": {"kernels": [], "kernel_links": [], "flash_attn": [{"include": [job]}]}, "chunk": {"include": [job]}, "job": job}
    for name, data in shapes.items():
        (tmp_path / name).write_text(json.dumps(data))
        assert jobs_from_plan(str(tmp_path / name)) == [("a", "cell")]
    (tmp_path / "bad").write_text(json.dumps({"include": [{"cell": 1}]}))
    with pytest.raises(FaforgeError, match="not a plan, a chunk or a job"):
        jobs_from_plan(str(tmp_path / "bad"))


def test_github_outputs_name_every_chunk_slot_of_every_stage():
    chunk = {"include": [{"cell": "a"}]}
    text = github_outputs({"kernels": [], "kernel_links": [], "flash_attn": [chunk]}, max_chunks=2)
    assert text.splitlines() == ["kernels-chunks=0", "kernels-0=", "kernels-1=", "kernel_links-chunks=0", "kernel_links-0=",
                                 "kernel_links-1=", "flash_attn-chunks=1", 'flash_attn-0={"include":[{"cell":"a"}]}', "flash_attn-1="]
