"""`faforge plan`: build cost -> CI jobs, GitHub's limits (256 jobs per matrix, 6 h per job), the JSON schema."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from faforge import progress
from faforge.channel.local import PackageSpec, assemble, index
from faforge.costmodel.runners import HOST_TU, cell_part, load_build_cost, split_kernels
from faforge.families.flash_attn_3 import backend as fa3_backend
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.families.flash_attn_3.plan import PIECES_STAGE as FA3_PIECES_STAGE
from faforge.families.flash_attn_3.plan import STAGE as FA3_STAGE
from faforge.families.flash_attn_3.plan import fa3_parts
from faforge.families.flash_attn_3.plan import piece_estimates as fa3_pieces
from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from faforge.matrix.kernels import kernel_pin
from faforge.matrix.render_cache import selected_cells
from faforge.release.plan.stage import Holdings, make_plan
from tests.support.docs import PIPELINE, doc_text
from tests.support.http_server import serve_directory

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "plan.json").read_text())
ALL_TUS = 72


STAGES = tuple(stage for family in FAMILIES for stage in family.plan.stages)


def faforge(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, timeout=300, env=env
    )


def plan_json(*args) -> dict:
    """`faforge plan --json` with these arguments: exit 0 and output that the committed schema accepts."""
    result = faforge("plan", *args, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return data


@pytest.fixture(scope="module")
def cost():
    return load_build_cost()


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@pytest.fixture(scope="module")
def rendered(matrix):
    return selected_cells(matrix, "all")


def test_every_piece_fits_the_runner_and_covers_each_tu_once(cost):
    for archs in ("80;90;100;120+PTX", "80;90+PTX", "90"):
        parts = split_kernels(cost, "linux-64", archs)
        limit = cost.runner_for("linux-64").job_limit_minutes
        assert all(0 < p.minutes <= limit for p in parts)
        if [p.name for p in parts] == ["kernels"]:
            continue
        assert parts[-1].name == "kernels-link" and parts[-1].tus == ()
        kernels = [tu for p in parts[:-1] for tu in p.tus]
        assert len(kernels) == len(set(kernels)) == ALL_TUS
        assert HOST_TU not in kernels, "flash_api.cpp belongs to the cells, not to the kernel package"


def test_a_kernel_package_that_fits_one_job_is_not_split_and_one_that_does_not_is(cost):
    # At the measured ~8 CPU minutes per TU and arch, with one nvcc job at a time (16 GB), even one
    # arch's 72 TUs do not fit 6 h on a hosted runner; four archs need several pieces per class.
    single = split_kernels(cost, "linux-64", "90")
    assert single[-1].name == "kernels-link" and len(single) > 2
    many = split_kernels(cost, "linux-64", "80;90;100;120+PTX")
    assert len(many) > len(single) and many[-1].name == "kernels-link"
    assert {p.name.split("-")[0] for p in many[:-1]} == {"fwd", "bwd", "fwd_split"}, "pieces are runs of one TU class"
    # A big runner (16 nvcc jobs in 128 GB) builds one arch whole.
    big = replace(cost, runners={**cost.runners, "linux-64": replace(cost.runners["linux-64"], cpus=32, memory_gb=128)})
    assert [p.name for p in split_kernels(big, "linux-64", "90")] == ["kernels"]


def test_a_cell_job_compiles_only_flash_api_and_links(cost):
    part = cell_part(cost)
    assert part.name == "cell" and part.tus == (HOST_TU,)
    assert part.minutes == math.ceil(cost.setup_minutes + cost.link_minutes + cost.safety_factor * cost.host_tu_minutes)
    assert part.minutes < min(p.minutes for p in split_kernels(cost, "linux-64", "90") if p.tus), (
        "a cell job is shorter than any kernel piece"
    )


def test_chunks_never_exceed_the_matrix_limit(cost, matrix):
    small = replace(cost, max_jobs_per_matrix=5)
    wanted = [family.plan.wanted(matrix, "all") for family in FAMILIES]
    plan = make_plan(wanted, Holdings(present=set(), cost=small, channel=None, index=None, report=progress), None)
    data = plan.to_json()
    assert plan.stages == STAGES
    for stage in STAGES:
        assert [j for c in data[stage] for j in c["include"]] == plan.jobs[stage]
        assert all(len(c["include"]) <= 5 for c in data[stage])
    assert len(data["flash_attn"]) > 1


def jobs_of(data, stage):
    return [j for c in data[stage] for j in c["include"]]


def test_plan_json_schedules_each_kernel_package_once_and_every_cell_after_it(rendered, matrix, repo):
    data = plan_json()
    assert data["to_build"] == [r.cell.id for r in rendered]
    by_slug = {k.key.slug: k for k in matrix.kernels}
    # The conda cells' kernel packages (the pip world's own are tests/release/test_plan_pip.py's).
    kernels, links = (
        [j for j in jobs_of(data, stage) if j["kernels"] in by_slug] for stage in ("kernels", "kernel_links")
    )
    cells = jobs_of(data, "flash_attn")
    # The kernels: 12 cold builds for the whole matrix (the split build: about 10, one per platform, CUDA and
    # archs, plus CUDA 12.9's second Philox layout on both platforms), each planned once.
    keys = {(r.cell.platform, r.cell.cuda, r.cell.cuda_archs, r.cell.philox_offset_bits) for r in rendered}
    assert len([k for k in data["kernel_packages"] if k["id"] in {m.key.id for m in matrix.kernels}]) == len(keys) == 12
    cost = load_build_cost()
    assert {j["kernels"] for j in kernels} == set(by_slug)
    for slug, package in by_slug.items():
        expected = split_kernels(cost, package.key.platform, package.key.cuda_archs)
        mine = [j for j in kernels + links if j["kernels"] == slug]
        assert [j["part"] for j in mine] == [p.name for p in expected], "one kernel package, its jobs once"
        assert all(j["slug"] == f"{slug}-{j['part']}" and j["cell"] in package.cell_ids for j in mine)
        if expected[-1].name == "kernels-link":
            assert mine[-1]["pieces"] == len(expected) - 1, "a link job knows how many pieces to expect"
    # The cells: one job each, compiling flash_api.cpp only, against its own kernel package.
    assert sorted(j["cell"] for j in cells) == sorted(data["to_build"])
    kernels_of = {cell_id: k for k in matrix.kernels for cell_id in k.cell_ids}
    for job in cells:
        assert (
            job["part"] == "cell"
            and job["kernels"] == kernels_of[job["cell"]].key.slug
            and not job["kernel-in-channel"]
        )
        assert job["timeout-minutes"] == cell_part(cost).minutes
    for stage in STAGES:
        assert len(data[stage]) <= 2, "fits the 2 chunk jobs per stage of .github/workflows/build.yml"
    pipeline = doc_text(PIPELINE)
    assert (
        f"the whole matrix is {len(kernels)} piece jobs, {len(links)} link jobs and {len(cells)} cell jobs" in pipeline
    )


def pinned_build(package, rendered):
    """The kernel build the package's cells pin exactly, as their render has it."""
    return next(kernel_pin(r.run_requirements).build for r in rendered if r.cell.id in package.cell_ids)


def kernel_record(package, build):
    """A real libflash-attn-kernels .conda under `build` (PackageSpec -> py-rattler-build)."""
    return PackageSpec(package.name, package.version, build, package.key.platform)


def test_a_kernel_package_in_the_channel_is_not_rebuilt(tmp_path, matrix, rendered):
    """A real file:// channel holding one kernel package: its kernel jobs vanish, its cells take it from there."""
    channel = tmp_path / "channel"
    held = next(k for k in matrix.kernels if k.key.id == "linux-64/cu129/sm80_90_100_120ptx/philox64")
    other_build = next(k for k in matrix.kernels if k.key.id == "linux-64/cu129/sm80_90_100_120ptx/philox32")
    assemble(kernel_record(held, pinned_build(held, rendered)), channel)
    # Same name, version, CUDA and archs, but the other Philox layout (and build number): not a stand-in
    # for the torch <= 2.9 cells' kernels.
    assemble(kernel_record(other_build, f"{other_build.key.build_string_prefix}0000000_7"), channel)
    index(channel)
    data = plan_json("--channel", str(channel), "--platform", "linux-64")
    packages = {k["id"]: k for k in data["kernel_packages"]}
    assert packages[held.key.id]["in_channel"] and not packages[other_build.key.id]["in_channel"]
    assert held.key.slug not in {j["kernels"] for stage in ("kernels", "kernel_links") for j in jobs_of(data, stage)}
    assert other_build.key.slug in {j["kernels"] for j in jobs_of(data, "kernels")}
    cells = {j["cell"]: j for j in jobs_of(data, "flash_attn")}
    assert {cells[c]["kernel-in-channel"] for c in held.cell_ids} == {True}
    assert {cells[c]["kernel-in-channel"] for c in other_build.cell_ids} == {False}
    human = faforge("plan", "--channel", str(channel), "--platform", "linux-64")
    assert "(1 kernel packages already there)" in human.stdout
    held_row = next(line for line in human.stdout.splitlines() if line.startswith(held.key.id + " "))
    assert "in the channel" in held_row and held_row.split()[-1] == str(len(held.cell_ids))


def test_a_kernel_package_built_from_other_inputs_is_stale_and_rebuilt(tmp_path, matrix, rendered):
    """The channel holds the kernel package under its build string but another hash (another digest of
    its inputs: faforge.matrix.inputs): not a stand-in, listed as stale, built again."""
    channel = tmp_path / "channel"
    held = next(k for k in matrix.kernels if k.key.id == "linux-64/cu129/sm80_90_100_120ptx/philox64")
    old = f"{held.key.build_string_prefix}1a2b3c4_{held.build_number}"
    assert old != pinned_build(held, rendered)
    assemble(kernel_record(held, old), channel)
    index(channel)
    data = plan_json("--channel", str(channel), "--platform", "linux-64")
    assert not next(k for k in data["kernel_packages"] if k["id"] == held.key.id)["in_channel"]
    assert held.key.slug in {j["kernels"] for j in jobs_of(data, "kernels")}
    assert data["stale"] == [f"linux-64/{held.name}-{held.version}-{old}.conda"]


def test_github_output_and_the_chunk_count_guard(tmp_path):
    out = tmp_path / "github_output"
    result = faforge("plan", "--platform", "linux-64", "--github-output", str(out), "--max-chunks", "2")
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in out.read_text().splitlines())
    for stage in STAGES:
        assert int(values[f"{stage}-chunks"]) == 1
        assert json.loads(values[f"{stage}-0"])["include"]
        assert values[f"{stage}-1"] == ""
    too_few = faforge("plan", "--max-chunks", "0")
    assert too_few.returncode == 2 and "chunks" in too_few.stderr and "Traceback" not in too_few.stderr


def test_a_channel_without_repodata_is_an_error_unless_new_channels_are_ok(tmp_path):
    with serve_directory(tmp_path) as url:
        strict = faforge("plan", "--channel", url, "--platform", "linux-64")
        lenient = faforge("plan", "--channel", url, "--platform", "linux-64", "--new-channel-ok", "--json")
    assert strict.returncode == 4 and "could not find subdir" in strict.stderr and "Traceback" not in strict.stderr
    assert "--new-channel-ok plans every cell" in strict.stderr.splitlines()[-1], (
        "the hint names the way out for a channel with nothing published"
    )
    assert "faforge publish" not in strict.stderr  # a remote URL
    assert lenient.returncode == 0 and "no repodata yet" in lenient.stderr
    assert json.loads(lenient.stdout)["in_channel"] == []


def test_plan_output_is_written_only_when_planning_succeeds(tmp_path):
    """`--json > plan.json` leaves an empty file when plan fails (the shell creates it first); --output never does."""
    out = tmp_path / "plan.json"
    out.write_text("the previous plan\n")
    failed = faforge(
        "plan", "--channel", "http://127.0.0.1:9/no-channel", "--platform", "linux-64", "--output", str(out)
    )
    assert failed.returncode not in (0, 2) and "Traceback" not in failed.stderr
    assert (
        "check the channel URL and your network" in failed.stderr and "publish" not in failed.stderr
    )  # not a local channel
    assert out.read_text() == "the previous plan\n"
    assert faforge("plan", "--platform", "linux-64", "--output", str(out)).returncode == 0
    assert json.loads(out.read_text()) == json.loads(faforge("plan", "--platform", "linux-64", "--json").stdout)
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary file left beside it


@pytest.mark.parametrize("content", [None, ""], ids=["missing", "empty"])
def test_build_with_the_plan_a_failed_plan_left_points_past_it(tmp_path, content):
    plan = tmp_path / "plan.json"
    if content is not None:
        plan.write_text(content)
    result = faforge("build", "--plan", str(plan), "--output-dir", str(tmp_path / "output"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--json >" not in result.stderr  # the command that just left it empty
    assert (
        "faforge plan --output FILE" in result.stderr
        and "without --channel it plans every cell, offline" in result.stderr
    )
    if content == "":
        assert "empty, so the `faforge plan` that was to write it failed" in result.stderr


def test_an_empty_channel_is_refused_not_ignored():
    """CI passes --channel "$FAFORGE_CHANNEL_URL"; with the variable unset that must not plan every cell silently."""
    result = faforge("plan", "--channel", "", "--platform", "linux-64", "--json")
    assert (
        result.returncode == 2
        and json.loads(result.stdout)["error"]["kind"] == "bad-input"
        and "--channel '': empty" in result.stderr
    )


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600)])
def test_plan_output_gets_the_mode_the_umask_gives(tmp_path, umask, mode):
    """A file written for the user is as readable as any file the user creates (it was 0600 whatever the umask)."""
    out = tmp_path / "plan.json"
    result = subprocess.run(
        [
            "sh",
            "-c",
            f'umask {umask:03o}; exec "$0" -m faforge "$@"',
            sys.executable,
            "plan",
            "--platform",
            "linux-64",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert out.stat().st_mode & 0o777 == mode


def test_an_empty_channel_folder_is_an_empty_channel(tmp_path):
    """A channel folder that nothing was published to yet plans every cell, as a channel with nothing in it."""
    empty = tmp_path / "channel"
    empty.mkdir()
    result = faforge("plan", "--channel", str(empty), "--platform", "linux-64", "--json")
    assert result.returncode == 0, result.stderr
    assert "holds no packages yet" in result.stderr
    planned, everything = (
        json.loads(result.stdout),
        json.loads(faforge("plan", "--platform", "linux-64", "--json").stdout),
    )
    assert planned == {**everything, "channel": str(empty)}


def test_a_channel_folder_with_packages_but_no_index_names_faforge_index(tmp_path):
    channel = tmp_path / "channel"
    (channel / "linux-64").mkdir(parents=True)
    (channel / "linux-64" / "flash-attn-2.8.3-py311_x_0.conda").write_bytes(b"")
    result = faforge("plan", "--channel", str(channel), "--platform", "linux-64", "--json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"— index it first: `faforge index {channel}`" in result.stderr


def fa3_record(package: dict, build: str) -> PackageSpec:
    """A real flash-attn-3 .conda (PackageSpec -> py-rattler-build) of an FA3 package of the plan, under `build`."""
    return PackageSpec(
        package["name"], package["version"], build, package["platform"], depends=("pytorch >=2.9 cuda*",)
    )


def test_plan_lists_every_fa3_package_beside_the_cells_with_the_build_strings_matrix_renders(matrix, cost):
    """FlashAttention-3's packages (one per platform, CUDA and arch list) get their own stage,
    one whole-package job each, named by the id `faforge matrix --fa3` prints and `faforge build` takes, after
    its pieces (see the next test)."""
    data = plan_json()
    listed = json.loads(faforge("matrix", "--fa3", "--json").stdout)
    packages = data[f"{FA3_STAGE}_packages"]
    assert [(p["id"], p["build_string"]) for p in packages] == [(p["id"], p["build_string"]) for p in listed]
    assert len(packages) == len(packages_of(matrix)) == 4 and not any(p["in_channel"] for p in packages)
    jobs = jobs_of(data, FA3_STAGE)
    by_id = {p.id: p for p in packages_of(matrix)}
    assert [j["cell"] for j in jobs] == [p["id"] for p in packages]
    for job, package in zip(jobs, packages, strict=True):
        fa3 = by_id[job["cell"]]
        assert (
            job["part"] == "all"
            and job["timeout-minutes"] == fa3_parts(cost, fa3, fa3_pieces([fa3], cost)[fa3.id])[-1].minutes
        )
        assert job["package"] == f"{package['name']}-{package['version']}-{package['build_string']}.conda"
        assert job["torch-range"] == f"{fa3.served[0]} {fa3.served[-1]}" and job["cuda"] == fa3.cuda
    # The cells' jobs are what they were; the FA3 jobs add their estimates to the total.
    assert data["estimated_runner_minutes"] == sum(
        j["timeout-minutes"] for stage in STAGES for j in jobs_of(data, stage)
    )
    linux64 = json.loads(faforge("plan", "--platform", "linux-64", "--json").stdout)
    assert [p["id"] for p in linux64[f"{FA3_STAGE}_packages"]] == [
        p.id for p in packages_of(matrix) if p.platform == "linux-64"
    ]


def test_an_fa3_package_too_long_for_one_job_is_split_into_pieces_before_its_all_job(matrix, cost):
    """`faforge bench-build` puts a full FA3 package at about 12 CPU hours, 2 days of one hosted job: each is
    split as a kernel package is (split_kernels over its timed TU classes) into pieces that fit the runner's
    job limit and cover every .cu TU once, then its `all` job, which needs them all (`pieces`) and builds the
    package with their objects in the compiler cache, keyed as its pieces' artifacts are (`kernels`)."""
    data = plan_json("--platform", "linux-64")
    limit = cost.runner_for("linux-64").job_limit_minutes
    pieces, finals = jobs_of(data, FA3_PIECES_STAGE), jobs_of(data, FA3_STAGE)
    assert [j["cell"] for j in finals] == [p.id for p in packages_of(matrix) if p.platform == "linux-64"]
    estimates = fa3_pieces(packages_of(matrix), cost)
    for final in finals:
        mine = [j for j in pieces if j["cell"] == final["cell"]]
        assert final["pieces"] == len(mine) == 7 and final["part"] == "all"
        assert [j["part"] for j in mine] == [
            "sm90_fwd-1of2",
            "sm90_fwd-2of2",
            "sm90_bwd",
            "sm80_fwd",
            "sm80_bwd",
            "combine",
            "scheduler",
        ]
        assert all(0 < j["timeout-minutes"] <= limit for j in [*mine, final]) and not any(j["pieces"] for j in mine)
        assert all(j["slug"] == f"{final['kernels']}-{j['part']}" and j["kernels"] == final["kernels"] for j in mine)
        assert all(j["package"] == final["package"] and j["name"] == f"{final['name']} [{j['part']}]" for j in mine)
        package = next(p for p in packages_of(matrix) if p.id == final["cell"])
        parts = fa3_parts(cost, package, estimates[package.id])
        covered = [tu for part in parts for tu in part.tus]
        cu = [Path(tu).name for tu in fa3_backend.sources(frozenset()) if tu.endswith(".cu")]
        assert sorted(covered) == sorted(cu), (
            "every .cu TU of a full build in exactly one piece; the glue in the all job"
        )
    # A package that fits one job stays one `all` job; without an estimate it is one job at the runner's limit.
    package = packages_of(matrix)[0]
    assert [p.name for p in fa3_parts(cost, package, [replace(parts[-1], name="kernels")])] == ["all"]
    assert fa3_parts(cost, package) == [replace(parts[-1], minutes=limit)]
    assert STAGES.index(FA3_PIECES_STAGE) == STAGES.index(FA3_STAGE) - 1, (
        "pieces before the all jobs, in `faforge build --plan` too"
    )


def test_an_fa3_package_in_the_channel_is_skipped_and_one_from_other_inputs_is_stale(tmp_path):
    """A real file:// channel: one FA3 package under its exact build string (not built again), another under
    its build string's head with another hash (built from other inputs: listed as stale and rebuilt)."""
    everything = json.loads(faforge("plan", "--platform", "linux-64", "--json").stdout)
    held, other = everything[f"{FA3_STAGE}_packages"]
    old = other["build_string"].rsplit("_h", 1)[0] + "_h1a2b3c4_0"  # cu129_sm80_90a_faforge_h1a2b3c4_0
    assert old != other["build_string"]
    channel = tmp_path / "channel"
    assemble(fa3_record(held, held["build_string"]), channel)
    assemble(fa3_record(other, old), channel)
    index(channel)
    data = plan_json("--channel", str(channel), "--platform", "linux-64")
    status = {p["id"]: p["in_channel"] for p in data[f"{FA3_STAGE}_packages"]}
    assert status == {held["id"]: True, other["id"]: False}
    assert [j["cell"] for j in jobs_of(data, FA3_STAGE)] == [other["id"]]
    assert data["stale"] == [f"linux-64/{other['name']}-{other['version']}-{old}.conda"]
    assert data["to_build"] == everything["to_build"], "the flash-attn cells are planned as before"
    human = faforge("plan", "--channel", str(channel), "--platform", "linux-64")
    assert human.returncode == 0, human.stderr
    rows = {line.split()[0]: line for line in human.stdout.splitlines() if line.startswith("linux-64/cu")}
    assert rows[held["id"]].endswith("in the channel") and rows[other["id"]].endswith("to build")
    assert f"1 {other['name']} packages to build in 1 jobs, after 7 piece jobs; 1 already in {channel}" in human.stdout
    assert {j["cell"] for j in jobs_of(data, FA3_PIECES_STAGE)} == {other["id"]}, (
        "no piece of a package the channel holds"
    )
