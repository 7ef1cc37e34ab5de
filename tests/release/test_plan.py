"""`faforge plan`: build cost -> CI jobs, GitHub's limits (256 jobs per matrix, 6 h per job), the JSON schema."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from faforge.commands.matrix import selected_cells
from faforge.release.cost import load_build_cost, split_cell
from faforge.release.plan import make_plan
from tests.support.http_server import serve_directory

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "plan.json").read_text())
ALL_TUS = 72


def faforge(*args, env=None):
    return subprocess.run([sys.executable, "-m", "faforge", *args], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def cost():
    return load_build_cost()


@pytest.fixture(scope="module")
def rendered():
    return selected_cells("all")


def test_every_piece_fits_the_runner_and_covers_each_tu_once(cost):
    for archs in ("80;90;100;120+PTX", "80;90+PTX", "90"):
        parts = split_cell(cost, "linux-64", archs)
        limit = cost.runner_for("linux-64").job_limit_minutes
        assert all(0 < p.minutes <= limit for p in parts)
        if [p.name for p in parts] == ["all"]:
            continue
        assert parts[-1].name == "link"
        kernels = [tu for p in parts[:-1] for tu in p.tus]
        assert len(kernels) == len(set(kernels)) == ALL_TUS


def test_a_cell_that_fits_one_job_is_not_split_and_one_that_does_not_is(cost):
    # At the measured ~8 CPU minutes per TU and arch, with one nvcc job at a time (16 GB), even one
    # arch's 72 TUs do not fit 6 h on a hosted runner; four archs need several pieces per class.
    single = split_cell(cost, "linux-64", "90")
    assert single[-1].name == "link" and len(single) > 2
    many = split_cell(cost, "linux-64", "80;90;100;120+PTX")
    assert len(many) > len(single) and many[-1].name == "link"
    assert {p.name.split("-")[0] for p in many[:-1]} == {"fwd", "bwd", "fwd_split"}, "pieces are runs of one TU class"
    # A big runner (16 nvcc jobs in 128 GB) builds one arch whole.
    big = replace(cost, runners={**cost.runners, "linux-64": replace(cost.runners["linux-64"], cpus=32, memory_gb=128)})
    assert [p.name for p in split_cell(big, "linux-64", "90")] == ["all"]


def test_chunks_never_exceed_the_matrix_limit(cost, rendered):
    small = replace(cost, max_jobs_per_matrix=5)
    plan = make_plan(rendered, small, set(), None)
    data = plan.to_json()
    assert sum(len(c["include"]) for c in data["build"]) == len(plan.build_jobs) > 5
    assert all(len(c["include"]) <= 5 for c in data["build"] + data["link"])
    assert [j for c in data["build"] for j in c["include"]] == plan.build_jobs


def test_plan_json_matches_schema_and_every_cell_is_planned(rendered):
    result = faforge("plan", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["to_build"] == [r.cell.id for r in rendered]
    build = [j for c in data["build"] for j in c["include"]]
    link = [j for c in data["link"] for j in c["include"]]
    # Each cell gets exactly one job that makes its package: `all`, or `link` after its pieces.
    makers = sorted(j["cell"] for j in build + link if j["part"] in ("all", "link"))
    assert makers == sorted(data["to_build"])
    # Pieces are planned once per kernel set (cells differing only in python), and cover its 72 TUs once.
    cost = load_build_cost()
    archs = {r.cell.id: r.cell.cuda_archs for r in rendered}
    for kernels in {j["kernels"] for j in link}:
        pieces = [j for j in build if j["kernels"] == kernels and j["part"] != "all"]
        expected = split_cell(cost, pieces[0]["platform"], archs[pieces[0]["cell"]])
        assert [j["part"] for j in pieces] == [p.name for p in expected[:-1]]
        assert sum(len(p.tus) for p in expected[:-1]) == ALL_TUS
        assert all(j["slug"] == f"{kernels}-{j['part']}" for j in pieces)
        assert {j["pieces"] for j in link if j["kernels"] == kernels} == {len(pieces)}, "a link job knows how many pieces to expect"
    sets = {j["kernels"] for j in link}
    assert len(sets) < len(link), "cells that differ only in python share their pieces"
    assert len(data["build"]) <= 4 and len(data["link"]) <= 4, "fits the 4 + 4 chunk jobs of .github/workflows/build.yml"


def test_github_output_and_the_chunk_count_guard(tmp_path):
    out = tmp_path / "github_output"
    result = faforge("plan", "--platform", "linux-64", "--github-output", str(out), "--max-chunks", "4")
    assert result.returncode == 0, result.stderr
    values = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert int(values["build-chunks"]) >= 1
    assert json.loads(values["build-0"])["include"]
    assert values["build-3"] == "" or json.loads(values["build-3"])
    too_few = faforge("plan", "--max-chunks", "0")
    assert too_few.returncode == 2 and "chunks" in too_few.stderr and "Traceback" not in too_few.stderr


def test_a_channel_without_repodata_is_an_error_unless_new_channels_are_ok(tmp_path):
    with serve_directory(tmp_path) as url:
        strict = faforge("plan", "--channel", url, "--platform", "linux-64")
        lenient = faforge("plan", "--channel", url, "--platform", "linux-64", "--new-channel-ok", "--json")
    assert strict.returncode == 1 and "could not find subdir" in strict.stderr and "Traceback" not in strict.stderr
    assert "--new-channel-ok plans every cell" in strict.stderr and "faforge publish" not in strict.stderr  # a remote URL
    assert lenient.returncode == 0 and "no repodata yet" in lenient.stderr
    assert json.loads(lenient.stdout)["in_channel"] == []


def test_plan_output_is_written_only_when_planning_succeeds(tmp_path):
    """`--json > plan.json` leaves an empty file when plan fails (the shell creates it first); --output never does."""
    out = tmp_path / "plan.json"
    out.write_text("the previous plan\n")
    failed = faforge("plan", "--channel", "http://127.0.0.1:9/no-channel", "--platform", "linux-64", "--output", str(out))
    assert failed.returncode not in (0, 2) and "Traceback" not in failed.stderr
    assert "check the channel URL and your network" in failed.stderr and "publish" not in failed.stderr  # not a local channel
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
    assert "faforge plan --output FILE" in result.stderr and "without --channel it plans every cell, offline" in result.stderr
    if content == "":
        assert "empty, so the `faforge plan` that was to write it failed" in result.stderr


def test_an_empty_channel_is_refused_not_ignored():
    """CI passes --channel "$FAFORGE_CHANNEL_URL"; with the variable unset that must not plan every cell silently."""
    result = faforge("plan", "--channel", "", "--platform", "linux-64", "--json")
    assert result.returncode == 2 and result.stdout == "" and "--channel '': empty" in result.stderr
