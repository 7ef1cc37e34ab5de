"""`faforge build` of a linux-aarch64 pip cell (the pip world) checks its cross-build inputs before any work, against
real artifacts: PyPI's aarch64 torch 2.11.0 and x86_64 torch 2.14.1 sites, Debian's arm64 CPython 3.11 and this
machine's x86_64 one, and the CUDA 13.0 toolkit with and without an sbsa-linux target tree. Each wrong input is bad
input (exit 2) naming the option, what it holds and what the cell needs; no build starts (no log, no output folder
content)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipworld.conftest import base_venv, cuda_13_home  # noqa: F401  (fixture: the CUDA 13.0 toolkit, no sbsa tree)
from tests.support.aarch64_cross import CrossUnavailable, cross_toolchain
from tests.support.tiers import slow

CELL = "pypi/linux-aarch64/py311/torch2.11/cu130/abi1"


@pytest.fixture(scope="module")
@slow("the aarch64 cross toolchain and PyPI's aarch64 torch")
def cross():
    try:
        return cross_toolchain("2.11.0")
    except CrossUnavailable as exc:
        pytest.skip(str(exc))


def build(cell: str, tmp_path: Path, *options) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", "build", cell, "--output-dir", str(tmp_path / "out"), *map(str, options)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def refused(result: subprocess.CompletedProcess, *says: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for text in says:
        assert text in result.stderr, (text, result.stderr)


def test_an_x86_64_python_is_not_the_target_python(cross, tmp_path):
    x86 = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    cell = CELL.replace("py311", f"py{sys.version_info[0]}{sys.version_info[1]}")
    refused(
        build(cell, tmp_path, "--torch-site", cross.torch_site, "--target-python", x86, "--cuda-home", cross.cuda_home),
        f"--target-python {x86}: an x86_64 executable; the cell's glue is for aarch64",
    )
    assert not (tmp_path / "out" / "logs").exists()


def test_a_torch_site_of_another_machine_release_or_python_is_refused(cross, tmp_path):
    x86_site = base_venv("2.14.1", "3.11").site_packages
    arm_python = cross.python.python
    refused(
        build(
            CELL.replace("torch2.11", "torch2.14"),
            tmp_path,
            "--torch-site",
            x86_site,
            "--target-python",
            arm_python,
            "--cuda-home",
            cross.cuda_home,
        ),
        f"--torch-site {x86_site}: torch 2.14.1+cu130 (CUDA 13.0, C++ ABI 1, x86_64)",
        "needs PyPI's torch 2.14.1 for CUDA 13.0, ABI 1, aarch64",
    )
    refused(
        build(
            CELL.replace("torch2.11", "torch2.14"),
            tmp_path,
            "--torch-site",
            cross.torch_site,
            "--target-python",
            arm_python,
            "--cuda-home",
            cross.cuda_home,
        ),
        "torch 2.11.0+cu130 (CUDA 13.0, C++ ABI 1, aarch64)",
        "needs PyPI's torch 2.14.1",
    )
    # Debian's arm64 python3.11 is the wrong target for a CPython 3.12 cell: its headers are include/python3.11.
    refused(
        build(
            CELL.replace("py311", "py312"),
            tmp_path,
            "--torch-site",
            cross.torch_site,
            "--target-python",
            arm_python,
            "--cuda-home",
            cross.cuda_home,
        ),
        f"--target-python {arm_python}: not a CPython 3.12 executable with include/python3.12/Python.h",
    )


def test_a_toolkit_without_the_sbsa_target_tree_is_refused(cross, cuda_13_home, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    refused(
        build(
            CELL,
            tmp_path,
            "--torch-site",
            cross.torch_site,
            "--target-python",
            cross.python.python,
            "--cuda-home",
            cuda_13_home,
        ),
        f"the CUDA toolkit {cuda_13_home} has no targets/sbsa-linux/include/cuda_runtime.h",
    )
