"""doctor on interpreters that hang, environments with corrupt install records, and a PEP 668 Python.

A hung probe is stopped after --timeout with every process it started (faforge.doctor.warden kills them all),
and what it reported until then is still diagnosed; corrupt metadata is a finding, not a broken
interpreter; the fix for an externally managed Python creates a venv, since pip refuses to install there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faforge.doctor import probe_facts
from faforge.doctor.examine import situation_from
from faforge.doctor.fix_commands import local_build
from tests.doctor import envs

SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.fixture
def venv312(tmp_path):
    return envs.pyenv_venv(tmp_path / "venv", "3.12")


def running(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def pids_from(path: Path) -> list[int]:
    deadline = time.monotonic() + 10
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"the hanging probe never wrote {path}"
        time.sleep(0.1)
    return [int(p) for p in path.read_text().split()]


def test_interpreter_that_never_answers_is_stopped_with_its_children(run_doctor, tmp_path):
    pidfile = tmp_path / "pids"
    python = tmp_path / "python3"  # looks like an interpreter, never reads its input, and starts a grandchild
    python.write_text(f"#!/bin/sh\nsleep 300 &\necho $$ $! > {pidfile}\nexec sleep 300\n")
    python.chmod(0o755)
    started = time.monotonic()
    result = run_doctor("--python", python, "--timeout", "2", json_output=False)
    took = time.monotonic() - started
    assert took < 30, f"doctor took {took:.0f} s with --timeout 2"
    assert result.code == 1 and result.stdout == ""
    assert f"waiting for the interpreter to start and list its packages: {python} (up to 2 s)" in result.stderr
    assert f"--python {python}: timed out after 2 s waiting for the interpreter to start" in result.stderr
    assert "Traceback" not in result.stderr
    assert not [pid for pid in pids_from(pidfile) if running(pid)], "the probe's processes outlived doctor"


def test_torch_import_that_hangs_is_reported_with_what_was_learned(run_doctor, venv312, tmp_path):
    pidfile = tmp_path / "pids"
    torch = envs.site_packages(venv312) / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text(
        "import os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pidfile)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(300)\n"
    )
    env = {**os.environ, "FAFORGE_DOCTOR_TIMEOUT": "3"}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "doctor", "--python", str(venv312), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert time.monotonic() - started < 60
    assert result.returncode == 1, result.stderr
    assert "waiting for `import torch`" in result.stderr and "Traceback" not in result.stderr

    report = json.loads(result.stdout)
    assert report["facts"]["python"]["version"].startswith("3.12.")  # learned before the hang
    problem = next(p for p in report["problems"] if p["kind"] == "torch-import-failed")
    assert any("timed out after 3 s" in d for d in problem["details"]), problem
    assert not [pid for pid in pids_from(pidfile) if running(pid)], "the probe's processes outlived doctor"


@pytest.mark.parametrize(
    "content", [b'{"url": 5}', bytes(range(256)) * 4, b"[1, 2]"], ids=["url-is-a-number", "random-bytes", "a-list"]
)
def test_corrupt_direct_url_is_a_finding(run_doctor, venv312, content):
    dist = envs.site_packages(venv312) / "flash_attn-2.8.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n")
    (dist / "INSTALLER").write_text("pip\n")
    (dist / "direct_url.json").write_bytes(content)
    result = run_doctor("--python", venv312)
    assert result.code == 1, result.stderr  # torch is missing: the venv is still diagnosed
    assert "torch-missing" in result.kinds()
    problem = result.problem("unreadable-metadata")
    assert problem["severity"] == "warning"
    assert [d for d in problem["details"] if d.startswith(str(dist / "direct_url.json") + ": ")], problem


def hostile_file(path: Path, kind: str) -> None:
    """A metadata file that is not one: the probe must neither block on it nor read it without end."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "nan":
        path.write_text('{"url": NaN}')
    elif kind == "sparse":
        with open(path, "wb") as handle:
            handle.truncate(2 << 30)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "nested", "nan", "sparse"])
def test_hostile_metadata_file_is_a_bounded_finding(run_doctor, venv312, kind):
    """Before: the FIFO blocked the probe until its timeout, /dev/zero was read until memory ran out,
    the nesting crashed the probe's env stage with a RecursionError and NaN was taken for a value."""
    dist = envs.site_packages(venv312) / "flash_attn-2.8.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: flash-attn\nVersion: 2.8.3\n")
    hostile_file(dist / "direct_url.json", kind)
    started = time.monotonic()
    result = run_doctor("--python", venv312, "--timeout", "60")
    assert time.monotonic() - started < 45
    assert result.code == 1, result.stderr
    assert "torch-missing" in result.kinds()
    problem = result.problem("unreadable-metadata")
    assert [d for d in problem["details"] if d.startswith(str(dist / "direct_url.json") + ": ")], problem


@pytest.mark.parametrize(
    "content",
    [bytes(range(256)) * 4, b"[]", b'{"name": "pytorch", "version": 2.7, "files": 5}'],
    ids=["random-bytes", "a-list", "wrong-types"],
)
def test_corrupt_conda_record_is_a_finding(run_doctor, venv312, content):
    prefix = venv312.parent.parent
    (prefix / "conda-meta").mkdir()
    record = prefix / "conda-meta" / "pytorch-2.7.1-cuda129_mkl_py312_h1234567_302.json"
    record.write_bytes(content)
    result = run_doctor("--python", venv312)
    assert result.code == 1, result.stderr
    problem = result.problem("unreadable-metadata")
    assert [d for d in problem["details"] if d.startswith(f"{record}: ")], problem


@pytest.mark.slow  # creates a venv with the system Python
def test_externally_managed_python_gets_a_venv(run_doctor, tmp_path):
    stdlib = (
        subprocess.run(
            [str(SYSTEM_PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if SYSTEM_PYTHON.exists()
        else ""
    )
    if not stdlib or not (Path(stdlib) / "EXTERNALLY-MANAGED").exists():
        pytest.skip(f"{SYSTEM_PYTHON} is not an externally managed (PEP 668) Python here")
    refused = subprocess.run(
        [str(SYSTEM_PYTHON), "-m", "pip", "install", "--dry-run", "--no-index", "pip"], capture_output=True, text=True
    )
    assert "externally-managed-environment" in refused.stderr  # what the old fix would have run into
    env = {**os.environ, "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "doctor", "--python", str(SYSTEM_PYTHON), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )

    report = json.loads(result.stdout)
    if report["facts"]["torch"]["installed"]:
        pytest.skip(f"{SYSTEM_PYTHON} has a torch here; this test wants the no-torch fix")
    fix = next(f for f in report["fixes"] if f["kind"] == "pip-install")
    venv = tmp_path / "venvs" / "flash-attn"
    assert fix["commands"][0] == f"{SYSTEM_PYTHON} -m venv {venv}" and len(fix["commands"]) == 2
    assert fix["commands"][1].startswith(
        f"{venv}/bin/python -m pip install --extra-index-url {fix['index_url']} --only-binary flash-attn torch=="
    )
    assert not [c for c in fix["commands"] if c.startswith(f"{SYSTEM_PYTHON} -m pip")]
    subprocess.run(fix["commands"][0].split(), check=True, capture_output=True, timeout=120)  # the venv really comes up
    allowed = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "--dry-run", "--no-index", "pip"],
        capture_output=True,
        text=True,
    )
    assert allowed.returncode == 0, allowed.stderr


def _situation(torch_version: str):
    stages = {
        "env": {
            "python": {
                "executable": "/env/bin/python",
                "version": "3.12.1",
                "implementation": "cpython",
                "soabi": "cpython-312-x86_64-linux-gnu",
                "ext_suffix": ".cpython-312-x86_64-linux-gnu.so",
                "prefix": "/env",
            },
            "system": {"os": "Linux", "machine": "x86_64", "glibc": "2.36"},
            "conda": None,
            "distributions": [],
            "torch_package": "/env/lib/python3.12/site-packages/torch",
        },
        "torch": {"imported": True, "version": torch_version, "cuda": "12.8", "cxx11_abi": 1},
        "import": {"ok": False, "error": {"type": "ImportError", "message": "undefined symbol: x"}},
    }
    return situation_from(probe_facts.parse(stages, None, (), "not found"))


@pytest.mark.parametrize(("torch", "standard"), [("2.9.1+cu128", "C++17"), ("2.13.0", "C++17"), ("2.14.1", "C++20")])
def test_local_build_names_the_cxx_standard_the_build_script_uses(torch, standard):
    """recipes/flash-attn/build_flash_attn.py (CXX20_FROM_TORCH) switches to C++20 for torch >= 2.14 only."""
    fix = local_build(_situation(torch), "90", ("signature-drift",), "2.8.3.post2")
    assert [n for n in fix.notes if f"a {standard} compiler" in n], fix.notes


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--timeout", "0"), {}),
        (("--timeout", "nan"), {}),
        (("--timeout", "-5"), {}),
        ((), {"FAFORGE_DOCTOR_TIMEOUT": "soon"}),
    ],
)
def test_a_timeout_that_is_no_number_of_seconds_is_exit_2(args, env):
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "doctor", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "not a number of seconds between 0 and 86400" in result.stderr
