"""faforge.release.build.run's pure parts: which steps a build's jobs take, and reading a plan file's jobs."""

from __future__ import annotations

import json
import tarfile
from types import SimpleNamespace

import pytest

from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from faforge.release.build.jobs import build_steps, jobs_from_plan, require_known_ids
from faforge.release.build.run import run_build
from faforge.release.build.stage import Batch, BuildRequest, BuildWords
from faforge.release.build.steps import CellBuild
from faforge.release.plan.run import github_outputs


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
        "plan": {"version": 2, "kernels": [], "kernel_links": [], "flash_attn": [{"include": [job]}]},
        "chunk": {"include": [job]},
        "job": job,
        "plan v3": {
            "version": 3,
            "kernels": [],
            "kernel_links": [],
            "flash_attn": [{"include": [job]}],
            "flash_attn_3": [{"include": [fa3]}],
        },
        "plan v4": {
            "version": 4,
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


def test_every_id_is_owned_by_one_family_and_an_unknown_one_says_where_each_familys_ids_are_listed(matrix):
    """The build stage asks each family's `build` which ids are its own; the messages join their words."""
    families = [f.build for f in FAMILIES]
    package = packages_of(matrix)[0].id
    owners = require_known_ids(matrix, [matrix.cells[0].id, matrix.pip_cells[0].id, package], families)
    assert [owners[key] for key in (matrix.cells[0].id, matrix.pip_cells[0].id, package)] == [
        FAMILIES[0].build,
        FAMILIES[0].build,
        FAMILIES[1].build,
    ]
    for unknown, says in (
        (
            package.replace("sm80_90a", "sm80_90"),
            f"{package.replace('sm80_90a', 'sm80_90')}: no flash-attn-3 package of the matrix",
        ),
        (
            "flash-attn-3/" + package,
            "is not a cell id (e.g. linux-64/py312/torch2.7/cu129/abi1), a flash-attn-3 package id",
        ),
        ("linux-64/py312/torch9.9/cu129/abi1", "conda-forge has no torch 9.9"),
    ):
        with pytest.raises(FaforgeError) as caught:
            require_known_ids(matrix, [unknown], families)
        assert says in caught.value.message and caught.value.exit_code == 2
        assert caught.value.hint == (
            "`faforge matrix` lists every cell, `faforge matrix --world pypi` every pip cell, "
            "`faforge matrix --fa3` every flash-attn-3 package, `faforge matrix --fa4` every flash-attn-4 package, "
            "`faforge plan` the jobs a channel lacks"
        )


class NextFamily:
    """A family the build stage has never seen (a pure-Python noarch package, no kernels, no pieces): it plugs in
    through the BuildFamily protocol alone."""

    words = BuildWords(
        ids=("next package ids",),
        parts=(),
        whole=("next package",),
        source="next packages from this sdist",
        listing="`faforge matrix --next` every next package",
        named="next packages",
        built="next packages",
        about="A next package id builds its noarch package.",
    )

    def __init__(self):
        self.ran = []

    def owns(self, matrix, key):
        return key.startswith("noarch/next-")

    def refusal(self, matrix, key):
        return None

    def example(self, matrix):
        return "a next package id (e.g. noarch/next-1.0)"

    def jobs(self, matrix, wanted, request, source):
        family = self

        class Jobs:
            from_recipe = bool(wanted)

            def batches(self, where, stack):
                def run(report, first, total):
                    family.ran.append((wanted, first, total, where.output_dir))
                    return [CellBuild(key, part, "built", 0.0, None, where.log_dir / "x.log") for key, part in wanted]

                return [Batch(len(wanted), run)] if wanted else []

        return Jobs()


def request(tmp_path, cells, source=None):
    return BuildRequest(
        cells=cells,
        part="all",
        plan=None,
        output_dir=tmp_path / "out",
        log_dir=None,
        source=source,
        channel_alias=[],
        extra_channel=[],
    )


def test_a_next_family_builds_through_the_protocol_with_no_edit_to_the_build_stage(matrix, tmp_path):
    families = [*(f.build for f in FAMILIES), NextFamily()]
    results = run_build(request(tmp_path, ["noarch/next-1.0", "noarch/next-2.0"]), None, families)
    assert [(r.cell, r.status) for r in results] == [("noarch/next-1.0", "built"), ("noarch/next-2.0", "built")]
    assert families[-1].ran == [
        ([("noarch/next-1.0", "all"), ("noarch/next-2.0", "all")], 1, 2, (tmp_path / "out").resolve())
    ]
    with pytest.raises(FaforgeError) as caught:
        run_build(request(tmp_path, []), None, families)
    assert caught.value.hint == (
        "name cells (see `faforge matrix`), flash-attn-3 packages (`faforge matrix --fa3`), flash-attn-4 packages "
        "(`faforge matrix --fa4`) or next packages, "
        "or pass --plan FILE"
    )
    with pytest.raises(FaforgeError, match=r"is not a cell id .* or a next package id"):
        run_build(request(tmp_path, ["nope"]), None, families)


def test_source_serves_one_familys_recipe(matrix, tmp_path):
    families = [*(f.build for f in FAMILIES), NextFamily()]
    sdist = tmp_path / "flash_attn-2.8.3.tar.gz"
    with tarfile.open(sdist, "w:gz"):
        pass  # an empty archive: checked as an sdist, never built, since the request is refused first
    with pytest.raises(
        FaforgeError,
        match="--source replaces one recipe's source, but these jobs build flash-attn cells and next packages",
    ):
        run_build(request(tmp_path, [matrix.cells[0].id, "noarch/next-1.0"], source=sdist), None, families)
