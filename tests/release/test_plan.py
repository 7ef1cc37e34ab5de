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
    single = split_cell(cost, "linux-64", "90")
    assert [p.name for p in single] == ["all"]
    # Four SASS archs at the measured per-arch minutes and one nvcc job at a time (16 GB) cannot fit 6 h.
    many = split_cell(cost, "linux-64", "80;90;100;120+PTX")
    assert len(many) > 2 and many[-1].name == "link"
    # A bigger runner builds the same cell whole.
    big = replace(cost, runners={**cost.runners, "linux-64": replace(cost.runners["linux-64"], cpus=32, memory_gb=128)})
    assert [p.name for p in split_cell(big, "linux-64", "80;90;100;120+PTX")] == ["all"]


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
    planned = {j["cell"] for c in data["build"] for j in c["include"]}
    assert planned == set(data["to_build"])
    split = {j["cell"] for c in data["link"] for j in c["include"]}
    assert all(any(j["cell"] == cell and j["part"] != "all" for c in data["build"] for j in c["include"]) for cell in split)


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
    assert lenient.returncode == 0 and "no repodata yet" in lenient.stderr
    assert json.loads(lenient.stdout)["in_channel"] == []
