"""faforge.release.build_run's pure parts: which steps a build's jobs take, and reading a plan file's jobs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.plan import piece_estimates as fa3_pieces
from faforge.matrix import load_matrix
from faforge.release.build_jobs import build_steps, fa3_jobs, jobs_from_plan, require_known_ids
from faforge.release.plan_run import github_outputs


def cell(name: str, cuda: str = "12.9"):
    return SimpleNamespace(id=name, platform="linux-64", cuda=cuda, cuda_archs="80;90", philox_offset_bits=64)


def test_an_all_job_of_a_split_recipe_builds_its_kernel_package_once_per_key_then_the_cell():
    a, b, c = cell("a"), cell("b"), cell("c", cuda="13.0")
    steps = build_steps([(a, "all", ()), (b, "all", ()), (c, "all", ())], kernels_in_recipe=True)
    assert [(s[0].id, s[1]) for s in steps] == [
        ("a", "kernels"),
        ("a", "cell"),
        ("b", "cell"),
        ("c", "kernels"),
        ("c", "cell"),
    ]


def test_named_parts_and_a_recipe_without_kernel_output_keep_their_jobs():
    a = cell("a")
    jobs = [(a, "all", ()), (a, "bwd-1of2", ("x.cu",))]
    assert build_steps(jobs, kernels_in_recipe=False) == jobs
    assert build_steps(jobs[1:], kernels_in_recipe=True) == jobs[1:]


def test_a_plan_a_chunk_and_a_job_each_give_their_jobs(tmp_path):
    job = {"cell": "a", "part": "cell"}
    fa3 = {"cell": "linux-64/cu130/sm80_90a", "part": "all"}
    shapes = {
        "plan": {"kernels": [], "kernel_links": [], "flash_attn": [{"include": [job]}]},
        "chunk": {"include": [job]},
        "job": job,
        "plan v3": {
            "kernels": [],
            "kernel_links": [],
            "flash_attn": [{"include": [job]}],
            "flash_attn_3": [{"include": [fa3]}],
        },
        "plan v4": {
            "kernels": [],
            "kernel_links": [],
            "flash_attn": [{"include": [job]}],
            "flash_attn_3_pieces": [{"include": [{**fa3, "part": "sm80_bwd"}]}],
            "flash_attn_3": [{"include": [fa3]}],
        },
    }
    for name, data in shapes.items():
        (tmp_path / name).write_text(json.dumps(data))
        fa3_jobs_of = {"plan v3": [(fa3["cell"], "all")], "plan v4": [(fa3["cell"], "sm80_bwd"), (fa3["cell"], "all")]}
        assert jobs_from_plan(str(tmp_path / name)) == [("a", "cell"), *fa3_jobs_of.get(name, [])], (
            "an FA3 piece comes before its all job"
        )
    (tmp_path / "bad").write_text(json.dumps({"include": [{"cell": 1}]}))
    with pytest.raises(FaforgeError, match="not a plan, a chunk or a job"):
        jobs_from_plan(str(tmp_path / "bad"))


def test_github_outputs_name_every_chunk_slot_of_every_stage():
    chunk = {"include": [{"cell": "a"}]}
    data = {
        "kernels": [],
        "kernel_links": [],
        "flash_attn": [chunk],
        "wheels": [chunk],
        "flash_attn_3_pieces": [chunk],
        "flash_attn_3": [chunk, chunk],
    }
    text = github_outputs(data, tuple(data), max_chunks=2)
    assert text.splitlines() == [
        "kernels-chunks=0",
        "kernels-0=",
        "kernels-1=",
        "kernel_links-chunks=0",
        "kernel_links-0=",
        "kernel_links-1=",
        "flash_attn-chunks=1",
        'flash_attn-0={"include":[{"cell":"a"}]}',
        "flash_attn-1=",
        "wheels-chunks=1",
        'wheels-0={"include":[{"cell":"a"}]}',
        "wheels-1=",
        "flash_attn_3_pieces-chunks=1",
        'flash_attn_3_pieces-0={"include":[{"cell":"a"}]}',
        "flash_attn_3_pieces-1=",
        "flash_attn_3-chunks=2",
        'flash_attn_3-0={"include":[{"cell":"a"}]}',
        'flash_attn_3-1={"include":[{"cell":"a"}]}',
    ]


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def test_every_id_is_a_cell_or_an_fa3_package_and_an_unknown_one_says_where_ids_are_listed(matrix):
    fa3 = matrix.fa3[0].id
    require_known_ids(matrix, [matrix.cells[0].id, fa3])
    for unknown, says in (
        (
            fa3.replace("sm80_90a", "sm80_90"),
            f"{fa3.replace('sm80_90a', 'sm80_90')}: no flash-attn-3 package of the matrix",
        ),
        (
            "flash-attn-3/" + fa3,
            "is not a cell id (e.g. linux-64/py312/torch2.7/cu129/abi1) or a flash-attn-3 package id",
        ),
        ("linux-64/py312/torch9.9/cu129/abi1", "conda-forge has no torch 9.9"),
    ):
        with pytest.raises(FaforgeError) as caught:
            require_known_ids(matrix, [unknown])
        assert says in caught.value.message and caught.value.exit_code == 2
        assert (
            "`faforge matrix --fa3` every flash-attn-3 package" in caught.value.hint
            and "`faforge plan`" in caught.value.hint
        )


def test_an_fa3_package_is_one_whole_job_listed_once(matrix):
    a, b = matrix.fa3[0], matrix.fa3[1]
    cell = matrix.cells[0].id
    assert fa3_jobs(matrix, [(b.id, "all"), (cell, "cell"), (a.id, "all"), (b.id, "all")], fa3_pieces) == [
        (b, "all", ()),
        (a, "all", ()),
    ]


def test_an_fa3_piece_compiles_the_tus_faforge_plan_gave_it_and_an_unknown_part_says_which_exist(matrix):
    """A piece job (`faforge build ID --part sm80_bwd`) builds the TUs plan's split gave that piece: the
    package's sm80 backward kernels, through FAFORGE_BUILD_TUS; its `all` job builds the package."""
    a = matrix.fa3[0]
    (package, part, tus), whole = fa3_jobs(matrix, [(a.id, "sm80_bwd"), (a.id, "all")], fa3_pieces)
    assert (package, part, whole) == (a, "sm80_bwd", (a, "all", ()))
    assert tus and all(t.startswith("flash_bwd_") and t.endswith("_sm80.cu") for t in tus)
    for part in ("cell", "kernels-link", "sm90_fwd"):
        with pytest.raises(
            FaforgeError, match=f"--part {part}: {a.id} is a flash-attn-3 package without such a piece"
        ) as caught:
            fa3_jobs(matrix, [(a.id, part)], fa3_pieces)
        assert "sm90_fwd-1of2" in caught.value.hint and caught.value.hint.endswith("then all")
    with pytest.raises(FaforgeError, match="without such a piece") as caught:  # no estimate: one whole job
        fa3_jobs(matrix, [(a.id, "sm80_bwd")], None)
    assert "--part all" in caught.value.hint
