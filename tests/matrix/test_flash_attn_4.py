"""FlashAttention-4's conda packages (the third family): one noarch flash-attn-4 per known-good set, its run
requirements the set under conda-forge's names, checked on rattler-build's own render of the generated variant file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from faforge.errors import DataError
from faforge.families.flash_attn_4 import sets
from faforge.families.flash_attn_4.matrix import CONDA_NAMES, Fa4Rows, conda_pins, pin_key
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN_4
from faforge.matrix import load_matrix

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "tests" / "schemas" / "matrix-fa4.json"
RECIPE = REPO / FLASH_ATTN_4.recipe_dir / "recipe.yaml"


@pytest.fixture(scope="module")
def rows() -> Fa4Rows:
    found = load_matrix(REPO, FAMILIES).rows_of(FLASH_ATTN_4.key)
    assert isinstance(found, Fa4Rows)
    return found


@pytest.fixture(scope="module")
def rendered(rows):
    return {r.package.set_id: r for r in rows.render()}


def test_one_package_per_known_good_set_with_its_own_build_string(rows, rendered):
    data = sets.load()
    assert sorted(rendered) == sorted(s.id for s in data.sets) == ["torch2.11-cu130", "torch2.14-cu130"]
    strings = {key: r.build_string for key, r in rendered.items()}
    for key, string in strings.items():
        torch, cuda = key.removeprefix("torch").split("-")
        assert re.fullmatch(rf"torch{re.escape(torch)}_{cuda}_pyh[0-9a-f]+_0", string), string
    assert len(set(strings.values())) == len(strings)
    assert all(r.recipe["build"]["noarch"] == "python" for r in rendered.values())


def test_the_run_requirements_are_the_set_by_its_pin_policy_in_conda_names(rendered):
    data = sets.load()
    for kgs in data.sets:
        run = rendered[kgs.id].recipe["requirements"]["run"]
        assert f"pytorch >={kgs.torch},<2.{int(kgs.torch.split('.')[1]) + 1}.0a0 cuda130*" in run
        oldest, newest = kgs.python[0], kgs.python[-1]
        below = f"{newest.split('.')[0]}.{int(newest.split('.')[1]) + 1}"
        assert "cuda-version >=13.0,<14" in run and f"python >={oldest},<{below}" in run
        for name, version in kgs.packages.items():
            conda = CONDA_NAMES[name]
            if conda is None:  # PyPI's split cutlass libs: inside conda-forge's one nvidia-cutlass-dsl
                assert not any(r.startswith(name) for r in run)
                continue
            pin = "==" if name in data.exact else ">="
            assert f"{conda} {pin}{version}" in run, (conda, run)
    assert "triton ==3.6.0" in rendered["torch2.11-cu130"].recipe["requirements"]["run"]
    assert "triton ==3.8.0" in rendered["torch2.14-cu130"].recipe["requirements"]["run"]
    assert "typing_extensions >=4.15.0" in rendered["torch2.11-cu130"].recipe["requirements"]["run"]


def test_the_source_is_upstreams_wheel_as_the_data_names_it(rendered):
    (release,) = sets.load().releases
    for r in rendered.values():
        (source,) = r.recipe["source"]
        assert (source["url"], source["sha256"]) == (release.url, release.sha256)
        assert r.version == release.version


def test_the_recipe_reads_every_pin_the_matrix_writes_and_no_other():
    read = set(re.findall(r"\$\{\{ (fa4_pin_[a-z_]+) \}\}", RECIPE.read_text()))
    written = {pin_key(conda) for conda in CONDA_NAMES.values() if conda is not None}
    assert read == written


def test_a_set_package_without_a_conda_name_is_a_data_error():
    data = sets.load()
    kgs = replace(data.sets[0], packages={**data.sets[0].packages, "nvidia-matmul-heuristics": "0.1.0"})
    with pytest.raises(DataError, match="nvidia-matmul-heuristics has no conda name"):
        conda_pins(data, kgs)


def test_matrix_fa4_json_matches_its_schema():
    out = subprocess.run(
        [sys.executable, "-m", "faforge", "matrix", "--fa4", "--json"], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    assert [r["id"] for r in report] == ["noarch/torch2.11-cu130/4.0.0b40", "noarch/torch2.14-cu130/4.0.0b40"]
