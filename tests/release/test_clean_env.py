"""The verify gates' clean venv for a package as a real conda build makes it (the conda world
showed both defects: run_exports names sent to pip, and a pyenv shim taken for a Python)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from faforge.release import clean_env, venv_cache
from faforge.release.package import PackageFacts

# The run requirements of the flash-attn package the real recipe built in the conda world
# (tests/conda_world/test_recipe_in_world.py), as its info/index.json lists them.
REAL_BUILD_DEPENDS = (
    "cuda-cudart >=13.0.96,<14.0a0",
    "cuda-version >=13.0,<14",
    "einops",
    "libgcc >=15",
    "libstdcxx >=15",
    "libtorch >=2.11.0,<2.12",
    "pytorch >=2.11.0,<2.12 cuda130*",
    "python >=3.12,<3.13.0a0",
    "python 3.12.* *_cpython",
    "python_abi 3.12.* *_cp312",
)


def test_only_python_requirements_go_to_pip():
    package = PackageFacts(
        path=Path("x.conda"),
        name="flash-attn",
        version="2.8.3.post2",
        build="b",
        subdir="linux-64",
        sha256="0",
        depends=REAL_BUILD_DEPENDS,
        python="3.12",
        torch="2.11.0",
        cuda="13.0",
        cxx11_abi=1,
    )
    assert clean_env.pip_requirements(package) == ["einops", "pytest"]


def test_a_pyenv_shim_that_cannot_run_is_not_a_python(tmp_path, monkeypatch):
    """pyenv's shim for an unselected version exits 127 ('pyenv: python3.99: command not found')."""
    shim = tmp_path / "bin" / "python3.99"
    shim.parent.mkdir()
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.99: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    with pytest.raises(venv_cache.Unavailable, match=re.escape("no working Python 3.99")):
        venv_cache.find_python("3.99")


def test_a_working_python_is_found_behind_a_broken_shim(tmp_path, monkeypatch):
    version = "{}.{}".format(*sys.version_info[:2])
    other = "3.10" if version != "3.10" else "3.11"
    real = sorted(
        Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv").glob(f"versions/{other}.*/bin/python{other}")
    )
    if not real:
        pytest.skip(f"no pyenv CPython {other} on this machine to find behind the shim")
    shim = tmp_path / f"python{other}"
    shim.write_text("#!/bin/sh\nexit 127\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert venv_cache.find_python(other).name == f"python{other}" and venv_cache.find_python(other) != shim
