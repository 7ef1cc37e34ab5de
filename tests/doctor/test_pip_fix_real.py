"""Acceptance (the pip world): `faforge doctor` on a real pip venv with a mismatched flash-attn prints a pip
line that, run as printed against the loopback index, gives a healthy venv; a uv venv gets its `uv pip install`
line, run as printed too.

The parts are real:
- the venvs: hardlink copies (`cp -al`) of the cached torch 2.14.1 venv (tests/support/torch_envs.py), so PyPI's
  real torch 2.14.1 (CUDA 13.0, cp311) with its NVIDIA wheels is there and nothing downloads a torch; the uv
  venv is made by real uv, its site-packages the same hardlinks;
- the mismatched flash-attn: an extension built here that imports c10::cuda::SetDevice(int) (torch <= 2.2),
  the seed reports' `undefined symbol: _ZN3c104cuda9SetDeviceEi`, installed with pip;
- the wheels: the real glue wheel and kernel wheel `faforge wheel` packs from the conda world's kernel build and
  the tiny sdist's glue built against torch 2.14.1 (the real wheels' fixtures, tests/pipwheel/test_real_wheels.py),
  published with `faforge publish --index` (their gates recorded for their sha256) and served over loopback HTTP
  by the PEP 691-negotiating server;
- pip and uv install what doctor printed, word for word (shlex-split), with FAFORGE_PIP_INDEX naming the server.
torch, einops and NVIDIA's wheels come from the machine's own indexes (PyPI, or its pip configuration), as a
user's do; the pinned torch is already installed, so neither installer downloads it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.family import FLASH_ATTN
from tests.conda_world.conftest import build_in_world, cu130_kernel_package, sdist, world  # noqa: F401  (fixtures behind the real wheels)
from tests.doctor import envs
from tests.doctor.conftest import doctor
from tests.pipindex.test_publish_index import publish
from tests.pipwheel.test_real_wheels import (  # noqa: F401 (fixtures: pytest finds them by name)
    fa3_raw,
    raw_glue,
    torch214,
    unpacked_kernel,
    wheels,
)
from tests.recipe.test_build_script_real import build_python  # noqa: F401 (fixtures: pytest finds them by name)
from tests.support import tiny_wheels
from tests.support.cache import cache_dir
from tests.support.pip_index_server import serve_index

pytestmark = pytest.mark.slow

CELL = "pypi/linux-64/py311/torch2.14/cu130/abi1"
INDEX = "torch2.14-cu130"
GLUE_VERSION = "2.8.3.post2+torch2.14.cu130.abi1"
UV = Path(sys.executable).with_name("uv")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ builds the mismatched extension")


@pytest.fixture(scope="module")
def index(wheels, tmp_path_factory):  # noqa: F811 (an imported fixture, requested by name)
    """The real glue and kernel wheels published into a wheel index root, as the pipeline publishes them."""
    manifest = tmp_path_factory.mktemp("verification")
    built = [Path(wheels[kind]["wheel"]["path"]) for kind in ("glue", "kernel")]
    for path in built:
        tiny_wheels.record_gates(manifest, path)
    root = tmp_path_factory.mktemp("index") / "wheels"
    result = publish(built, manifest, root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / INDEX / FLASH_ATTN.package / "index.json").is_file()
    return root


def hardlink_venv(torch214, dest: Path) -> Path:  # noqa: F811 (an imported fixture, requested by name)
    """A venv of its own (pyvenv.cfg, bin/python) whose files are hardlinks into the cached torch venv."""
    result = subprocess.run(["cp", "-al", str(torch214.prefix), str(dest)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot hardlink the cached torch venv here: {result.stderr.strip()}")
    return dest / "bin" / "python"


def uv_venv(torch214, dest: Path, env: dict) -> Path:  # noqa: F811 (an imported fixture, requested by name)
    """A venv made by real uv (its pyvenv.cfg says `uv = ...`), its site-packages hardlinked into the torch venv's."""
    made = subprocess.run(
        [str(UV), "venv", "--quiet", "--python", str(torch214.python), str(dest)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    site = dest / "lib" / torch214.site_packages.parent.name / "site-packages"
    linked = subprocess.run(
        ["cp", "-al", f"{torch214.site_packages}/.", str(site)], capture_output=True, text=True, check=False
    )
    if linked.returncode != 0:
        pytest.skip(f"cannot hardlink the cached torch venv here: {linked.stderr.strip()}")
    return dest / "bin" / "python"


def install_mismatched(python: Path, tmp_path: Path) -> None:
    """flash-attn 2.3.3 whose extension imports SetDevice(int), as built for torch 2.1-2.2, installed with pip."""
    stub = envs.standin_c10(tmp_path / "torch-2.2-libs", cxx11_abi=1, set_device="int")
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        python,
        [envs.SET_DEVICE["int"]],
        (f"-L{stub}", "-lc10_cuda"),
    )
    envs.install_flash_attn(python, ext, tmp_path, "2.3.3")


def run_printed(commands: list[str], env: dict) -> str:
    """Each command word for word as doctor printed it; their output."""
    out = []
    for command in commands:
        result = subprocess.run(shlex.split(command), capture_output=True, text=True, env=env, timeout=900, check=False)
        assert result.returncode == 0, f"$ {command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        out.append(result.stdout + result.stderr)
    return "\n".join(out)


def assert_healthy(python: Path, base: str) -> None:
    after = doctor("--python", python, env={"FAFORGE_PIP_INDEX": base})
    assert after.code == 0, after.report["problems"]
    assert after.report["healthy"] is True and after.report["fixes"] == []
    fa = after.report["facts"]["flash_attn"]
    assert fa["version"] == GLUE_VERSION and after.report["facts"]["import"]["ok"] is True
    assert after.report["facts"]["torch"]["version"] == "2.14.1", "the installed torch was kept"
    imported = subprocess.run(
        [str(python), "-c", "import flash_attn, flash_attn_2_cuda; print(flash_attn.__file__)"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(str(python.parent.parent)), "flash_attn imports from the venv itself"


@needs_gxx
def test_the_printed_pip_line_heals_a_pip_venv(index, torch214, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    python = hardlink_venv(torch214, tmp_path / "venv")
    install_mismatched(python, tmp_path)
    with serve_index(index, tmp_path / "requests.jsonl") as base:
        before = doctor("--python", python, env={"FAFORGE_PIP_INDEX": base})
        assert before.code == 1 and before.kinds() == ["signature-drift"]
        assert before.report["facts"]["python"]["environment"] == "venv"
        fix = before.fix("pip-install")
        url = f"{base}{INDEX}/"
        assert (fix["cell"], fix["index_url"]) == (CELL, url)
        assert fix["commands"] == [
            f"{python} -m pip uninstall -y flash-attn",
            f"{python} -m pip install --extra-index-url {url} --only-binary flash-attn torch==2.14.1 "
            f"flash-attn=={GLUE_VERSION}",
        ]
        assert not any("conda" in c for f in before.report["fixes"] for c in f["commands"]), (
            "never a conda line for a pip venv"
        )
        printed = doctor("--python", python, json_output=False, env={"FAFORGE_PIP_INDEX": base}).stdout
        assert all(f"$ {c}" in printed for c in fix["commands"]) and f"index: {url}" in printed, printed
        log = run_printed(fix["commands"], dict(os.environ))
        assert "Requirement already satisfied: torch==2.14.1" in log, "pip kept the installed torch"
        assert_healthy(python, base)


@needs_gxx
def test_the_printed_uv_line_heals_a_uv_venv(index, torch214, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    if not UV.is_file():
        pytest.skip("uv is not installed beside this Python (a test extra: pip install -e '.[test]')")
    env = {
        **os.environ,
        "UV_CACHE_DIR": str(cache_dir("uv")),
        "UV_PYTHON_DOWNLOADS": "never",
        "PATH": f"{UV.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    python = uv_venv(torch214, tmp_path / "venv", env)
    install_mismatched(python, tmp_path)
    with serve_index(index, tmp_path / "requests.jsonl") as base:
        before = doctor("--python", python, env={"FAFORGE_PIP_INDEX": base})
        assert before.code == 1 and before.kinds() == ["signature-drift"]
        assert before.report["facts"]["python"]["environment"] == "uv-venv"
        assert "uv" in before.report["facts"]["python"]["venv"]
        fix = before.fix("uv-install")
        url = f"{base}{INDEX}/"
        assert (fix["cell"], fix["index_url"]) == (CELL, url)
        assert fix["commands"] == [
            (
                f"uv pip install --python {python} --reinstall-package flash-attn --extra-index-url {url} "
                "--only-binary flash-attn "
                f"torch==2.14.1 flash-attn=={GLUE_VERSION}"
            )
        ]
        log = run_printed(fix["commands"], env)
        assert f" + {FLASH_ATTN.package}=={GLUE_VERSION}" in log and " - flash-attn==2.3.3" in log, log
        assert " + torch" not in log and " - torch" not in log, "uv kept the installed torch"
        assert_healthy(python, base)
