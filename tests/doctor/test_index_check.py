"""A fix that cannot be installed is not a fix: doctor checks that the wheel index its pip or uv line names
serves the exact wheel the line installs (faforge.doctor.index_check).

The environment is a real venv without torch (a pyenv interpreter), whose fix installs PyPI's newest torch for
its Python and that cell's glue wheel from the cell's index. The index is a loopback server: the PEP
691-negotiating static server over a folder that lists the wheel, another wheel, or nothing; the hostile server's
silent path; a port nobody listens on. The default index URL is not reachable here, so every case names its
index with FAFORGE_PIP_INDEX.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.versions import vtuple
from tests.doctor import envs
from tests.doctor.conftest import doctor
from tests.support.hostile_server import serve_hostile
from tests.support.http_server import free_port
from tests.support.pip_index_server import requests, serve_index

PYTHON = "3.12"
PAGE = "<!DOCTYPE html><html><body>\n{links}\n</body></html>\n"


@pytest.fixture(scope="module")
def bare(tmp_path_factory) -> Path:
    """A venv of pyenv's Python 3.12 without torch or flash-attn: doctor's fix is a pip-install line."""
    return envs.pyenv_venv(tmp_path_factory.mktemp("bare") / "venv", PYTHON)


@pytest.fixture(scope="module")
def build():
    """The pip cell that fix installs: the newest torch's for linux-64 and this Python."""
    return max(
        (b for b in pip_builds(load_matrix(), "linux-64") if b.cell.python == PYTHON),
        key=lambda b: vtuple(b.cell.torch),
    )


def index_root(root: Path, index_name: str, *files: str) -> Path:
    """ROOT/INDEX/flash-attn/index.{html,json} listing `files`, as `faforge publish --index` writes them."""
    page = root / index_name / "flash-attn"
    page.mkdir(parents=True)
    links = "\n".join(f'<a href="../../files/{f}#sha256={"0" * 64}">{f}</a>' for f in files)
    (page / "index.html").write_text(PAGE.format(links=links))
    (page / "index.json").write_text(
        json.dumps(
            {
                "meta": {"api-version": "1.1"},
                "name": "flash-attn",
                "versions": [],
                "files": [{"filename": f, "url": f"../../files/{f}", "hashes": {"sha256": "0" * 64}} for f in files],
            }
        )
    )
    return root


def served_name(build) -> str:
    return build.glue_wheel("manylinux_2_28_x86_64")


def check_of(run) -> dict:
    return run.fix("pip-install")["index_check"]


def test_index_that_serves_the_wheel(bare, build, tmp_path):
    root = index_root(tmp_path / "wheels", build.cell.index_name, served_name(build))
    with serve_index(root, tmp_path / "log") as base:
        run = doctor("--python", bare, env={"FAFORGE_PIP_INDEX": base})
    assert run.code == 1, [
        f["index_check"] for f in run.report["fixes"]
    ]  # the diagnosis's own exit: torch and flash-attn are missing
    check = check_of(run)
    assert check["status"] == "served" and check["served"] is True and check["found"] == served_name(build)
    assert check["index"] == f"{base.rstrip('/')}/{build.cell.index_name}/"
    assert [r["path"] for r in requests(tmp_path / "log") if r["path"] != "/"] == [
        f"/{build.cell.index_name}/flash-attn/"
    ]


def test_index_without_the_wheel(bare, build, tmp_path):
    """The page lists the wheel of another Python only: exit 4, and the fix says which index lacks which file."""
    other = served_name(build).replace("cp312-cp312", "cp311-cp311")
    root = index_root(tmp_path / "wheels", build.cell.index_name, other)
    with serve_index(root, tmp_path / "log") as base:
        run = doctor("--python", bare, env={"FAFORGE_PIP_INDEX": base})
        text = doctor("--python", bare, json_output=False, env={"FAFORGE_PIP_INDEX": base})
    assert run.code == 4 and text.code == 4, run.stderr
    check = check_of(run)
    assert check["status"] == "no-such-file" and check["served"] is False
    assert f"{build.cell.index_name}/flash-attn/ lists 1 file(s), none of them {build.glue_wheel()}" in check["message"]
    assert "faforge publish --index" in check["hint"]
    assert run.kinds() == ["torch-missing", "flash-attn-missing"]  # the diagnosis stands
    assert "index check: FAILED, this line cannot install" in text.stdout
    assert "does not serve its wheel" in text.stdout


def test_index_that_answers_404(bare, build, tmp_path):
    root = index_root(tmp_path / "wheels", "torch0.0-cu000")  # another index only: the cell's is not there
    with serve_index(root, tmp_path / "log") as base:
        run = doctor("--python", bare, env={"FAFORGE_PIP_INDEX": base})
    assert run.code == 4, run.stderr
    check = check_of(run)
    assert (
        check["status"] == "not-found" and "HTTP 404" in check["message"] and build.cell.index_name in check["message"]
    )


def test_silent_index_is_bounded_and_keeps_the_diagnosis(bare):
    """A server that never answers: the read timeout ends the check, the exit stays the diagnosis's (1)."""
    with serve_hostile() as base:
        started = time.monotonic()
        run = doctor("--python", bare, env={"FAFORGE_PIP_INDEX": f"{base}/silent", "FAFORGE_HTTP_TIMEOUT": "2"})
        took = time.monotonic() - started
    assert run.code == 1, run.stderr
    check = check_of(run)
    assert check["status"] == "unchecked" and check["message"].startswith("the line could not be checked")
    assert "no answer within 2 s" in check["message"]
    assert took < 30, took


def test_unreachable_index_keeps_the_diagnosis(bare):
    run = doctor("--python", bare, env={"FAFORGE_PIP_INDEX": f"http://127.0.0.1:{free_port()}/wheels"})
    assert run.code == 1, run.stderr
    assert check_of(run)["status"] == "unchecked"
    assert run.kinds() == ["torch-missing", "flash-attn-missing"]


def test_offline_reads_nothing(bare, build, tmp_path):
    root = index_root(tmp_path / "wheels", "torch0.0-cu000")
    with serve_index(root, tmp_path / "log") as base:
        run = doctor("--python", bare, "--offline", env={"FAFORGE_PIP_INDEX": base})
    assert run.code == 1
    assert check_of(run)["status"] == "offline"
    assert [r for r in requests(tmp_path / "log") if r["path"] != "/"] == []


def test_local_index_folder(bare, build, tmp_path):
    """FAFORGE_PIP_INDEX as a file:// URL of an index root folder: its pages are read from disk."""
    root = index_root(tmp_path / "wheels", build.cell.index_name, served_name(build))
    (root / build.cell.index_name / "index.html").write_text(PAGE.format(links='<a href="flash-attn/">flash-attn</a>'))
    (root / build.cell.index_name / "index.json").write_text(
        json.dumps({"meta": {"api-version": "1.1"}, "projects": [{"name": "flash-attn"}]})
    )
    run = doctor("--python", bare, env={"FAFORGE_PIP_INDEX": root.as_uri()})
    assert run.code == 1, run.stderr
    assert check_of(run)["status"] == "served"
