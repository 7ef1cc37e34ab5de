"""`faforge doctor` as a user calls it: bad input exits 2 with one message, text and JSON agree."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from faforge.doctor.diagnose import KINDS
from tests.doctor import envs
from tests.support.docs import DOCTOR, doc_text

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("/nonexistent/python", "no such file"),
        ("notes.txt", "not executable, so not a Python interpreter"),
        ("notes.sh", "cannot run it: Exec format error"),
        ("/bin/true", "did not run faforge's probe, so it is not a usable Python 3 interpreter (exit 0: no output)"),
        (str(REPO / "variants"), "a folder without bin/python"),
    ],
)
def test_bad_python_exits_2_with_one_message(run_doctor, tmp_path, given, message):
    if not given.startswith("/"):  # a text file, with and without the executable bit
        (tmp_path / given).write_text("not a program\n")
        (tmp_path / given).chmod(0o755 if given.endswith(".sh") else 0o644)
        given = str(tmp_path / given)
    result = run_doctor("--python", given)
    assert result.code == 2
    assert result.report["error"]["kind"] == "bad-input"  # --json: the versioned error object
    progress, error = result.stderr.split("faforge doctor: error: ", 1)  # an interpreter that started says so first
    assert all(line.startswith("faforge doctor: waiting for ") for line in progress.splitlines())
    [line] = error.splitlines()
    assert line.startswith(f"--python {given}: {message}") and " — " in line


def test_empty_python_names_the_unset_variable(run_doctor):
    """The doctor page's `faforge doctor --python "$CONDA_PREFIX"` outside a conda environment."""
    result = run_doctor("--python", "")
    assert result.code == 2 and result.report["error"]["kind"] == "bad-input"
    assert "--python '': empty, as an unset variable such as $CONDA_PREFIX gives" in result.stderr
    assert "a folder without bin/python" not in result.stderr


def test_python2_is_refused(run_doctor):
    python2 = Path("/root/.pyenv/versions/2.7.18/bin/python")
    if not python2.exists():
        pytest.skip("no Python 2 interpreter here")
    result = run_doctor("--python", python2)
    assert result.code == 2 and "not a usable Python 3 interpreter" in result.stderr


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    return envs.pyenv_venv(tmp_path_factory.mktemp("bare") / "venv", "3.12")


def test_text_report_names_facts_problems_and_fixes(run_doctor, bare_venv):
    result = run_doctor("--python", bare_venv.parent.parent, json_output=False)  # an environment folder works too
    assert result.code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"faforge doctor: {bare_venv}"
    assert lines[1].startswith("python      3.12.")
    assert "torch       not installed" in lines
    assert (
        "  [error] torch-missing: torch is not installed in "
        + str(bare_venv.parent.parent)
        + "; flash-attn needs a CUDA build of torch"
        in lines
    )
    assert "Fix:" in lines and f"       $ {bare_venv} -m ensurepip" in lines, "a venv made --without-pip gets pip first"
    install = next(line for line in lines if line.startswith(f"       $ {bare_venv} -m pip install --extra-index-url "))
    assert install.endswith(".abi1") and " --only-binary flash-attn torch==" in install
    assert any(line.startswith("     index: ") and line.endswith("-cu132/") for line in lines)
    assert lines[-1] == "2 problems found"


def test_json_and_text_agree(run_doctor, bare_venv):
    as_json, as_text = run_doctor("--python", bare_venv), run_doctor("--python", bare_venv, json_output=False)
    assert as_json.code == as_text.code == 1
    for problem in as_json.report["problems"]:
        assert f"[{problem['severity']}] {problem['kind']}: {problem['message']}" in as_text.stdout
    for fix in as_json.report["fixes"]:
        assert fix["title"] in as_text.stdout


def test_default_is_the_running_interpreter(run_doctor):
    result = run_doctor()
    assert result.code in (0, 1)
    assert os.path.realpath(result.report["python"]) == os.path.realpath(os.sys.executable)


def test_docs_and_schema_name_every_kind():
    schema = json.loads((REPO / "tests" / "schemas" / "doctor.json").read_text())
    assert tuple(schema["$defs"]["report"]["properties"]["problems"]["items"]["properties"]["kind"]["enum"]) == KINDS
    section = doc_text(DOCTOR)
    for kind in KINDS + tuple(schema["$defs"]["report"]["properties"]["fixes"]["items"]["properties"]["kind"]["enum"]):
        assert f"`{kind}`" in section, kind
