"""The Quickstart's main job, `faforge matrix --platform all`, shows what every user needs: the conda cells, and the
pip cells each with the URL of the wheel index a pip or uv user passes (`--extra-index-url`), offline. Before, it
listed the 162 conda cells only, and a pip user never saw a pip cell or an index URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from faforge import config
from faforge.matrix import load_matrix


def run_matrix(*args: str, pip_index: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "FAFORGE_PIP_INDEX"}
    if pip_index is not None:
        env["FAFORGE_PIP_INDEX"] = pip_index
    return subprocess.run(
        [sys.executable, "-m", "faforge", "matrix", *args], capture_output=True, text=True, timeout=120, env=env
    )


def matrix_text(*args: str, pip_index: str | None = None) -> str:
    result = run_matrix(*args, pip_index=pip_index)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


@pytest.fixture(scope="module")
def main_job() -> str:
    return matrix_text("--platform", "all")


def test_the_main_job_lists_every_conda_cell_and_every_pip_cell_with_its_index_url(matrix, main_job):
    rows = {line.split()[0]: line for line in main_job.splitlines() if line.strip()}
    assert {c.id for c in matrix.cells} <= set(rows)
    for cell in matrix.pip_cells:
        assert cell.id in rows, f"{cell.id}: not in `faforge matrix --platform all`"
        assert f"{config.PUBLIC_PIP_INDEX}/{cell.index_name}/" in rows[cell.id], rows[cell.id]
    assert f"{len(matrix.cells)} cells (" in main_job and f"{len(matrix.pip_cells)} pip cells (" in main_job


def test_the_index_url_follows_faforge_pip_index():
    text = matrix_text("--platform", "linux-aarch64", pip_index="http://127.0.0.1:8000/")
    assert "http://127.0.0.1:8000/torch2.11-cu130/" in text and config.PUBLIC_PIP_INDEX not in text


def test_a_base_that_is_no_url_is_bad_input_naming_the_variable():
    result = run_matrix("--platform", "linux-64", pip_index="ftp://x")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("faforge matrix: error: $FAFORGE_PIP_INDEX is not a wheel index URL"), result.stderr


def test_json_and_a_named_world_are_unchanged(matrix):
    listed = json.loads(matrix_text("--json"))
    assert [c["id"] for c in listed] == [c.id for c in matrix.cells], "--json without --world: the conda worlds"
    conda_only = matrix_text("--world", "conda-forge", "--platform", "linux-64")
    assert "pip cells" not in conda_only and "pypi/" not in conda_only
