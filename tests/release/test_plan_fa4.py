"""`faforge plan` for flash-attn-4: one job per noarch package of the matrix in its own stage, none for a package the
channel's noarch subdir holds under the same file name, a rebuild for one it holds built from other inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.channel.local import PackageSpec, assemble, index
from faforge.families.flash_attn_4.build import packages_of
from faforge.families.flash_attn_4.plan import wanted
from faforge.family import FLASH_ATTN_4
from faforge.matrix import load_matrix

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "plan.json").read_text())
STAGE = FLASH_ATTN_4.key


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", "plan", *args], capture_output=True, text=True, timeout=300, check=False
    )


def plan_json(*args: str) -> dict:
    result = plan(*args, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    return data


def jobs(data: dict) -> list[dict]:
    return [job for chunk in data[STAGE] for job in chunk["include"]]


@pytest.fixture(scope="module")
def rendered():
    """The matrix's FA4 packages as the plan renders them, by id."""
    return {r.package.id: r for r in wanted(load_matrix(), "all").rendered}


def held_spec(r, build: str) -> PackageSpec:
    return PackageSpec(r.name, r.version, build, "noarch")


def test_every_package_of_the_matrix_is_one_job_against_an_empty_channel(rendered):
    ids = [p.id for p in packages_of(load_matrix())]
    assert len(ids) >= 2
    data = plan_json("--platform", "linux-64")
    built = jobs(data)
    assert [j["cell"] for j in built] == ids, "one job per package, in the matrix's order"
    for job in built:
        r = rendered[job["cell"]]
        assert job["part"] == "all" and job["platform"] == "noarch" and job["pieces"] == 0
        assert job["package"] == f"{FLASH_ATTN_4.package}-{r.version}-{r.build_string}.conda"
        assert job["build-string"] == r.build_string and job["torch"] == r.package.torch
    assert [p["in_channel"] for p in data[f"{STAGE}_packages"]] == [False] * len(ids)
    assert data["stale"] == []
    assert STAGE in plan_json("--platform", "all") and jobs(plan_json("--platform", "all")) == built
    assert jobs(plan_json("--platform", "linux-aarch64")) == [], "noarch packages are built on linux-64 only"


def test_a_package_the_channel_holds_is_not_planned_and_one_from_other_inputs_is_stale(tmp_path, rendered):
    first, second = list(rendered.values())[:2]
    channel = tmp_path / "channel"
    assemble(held_spec(first, first.build_string), channel)
    head, _, number = second.build_string.rpartition("_")
    old = f"{head.rsplit('_', 1)[0]}_pyh0000000_{number}"
    assert old != second.build_string
    assemble(held_spec(second, old), channel)
    index(channel)
    data = plan_json("--channel", str(channel), "--platform", "linux-64")
    assert [j["cell"] for j in jobs(data)] == [second.package.id] + [
        i for i in rendered if i not in (first.package.id, second.package.id)
    ]
    listed = {p["id"]: p["in_channel"] for p in data[f"{STAGE}_packages"]}
    assert listed[first.package.id] and not listed[second.package.id]
    assert data["stale"] == [f"noarch/{second.name}-{second.version}-{old}.conda"]
    human = plan("--channel", str(channel), "--platform", "linux-64")
    assert human.returncode == 0, human.stderr
    assert f"{len(rendered) - 1} {FLASH_ATTN_4.package} packages to build, 1 already in" in human.stdout
    row = next(line for line in human.stdout.splitlines() if line.startswith(first.package.id + " "))
    assert row.endswith("in the channel")
    assert "recipes/apache-tvm-ffi and recipes/quack-kernels" in human.stdout, "the dependency recipes are named"
