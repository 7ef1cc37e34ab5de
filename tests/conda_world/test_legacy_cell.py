"""The legacy cell (-c pytorch -c nvidia -c conda-forge, pre-C++11 ABI) in the conda world, as far as
the declared stand-ins allow: its run environment. Its build cannot run here: no CUDA 12 nvcc exists on
this machine, and torch 2.5.1's cpp_extension refuses nvcc 13 for a CUDA 12.x torch
(torch/utils/cpp_extension.py, _check_cuda_version); the nvidia channel's 12.x -dev packages and
conda-forge's CUDA 12 compilers have no sourced records either (tests/conda_world/world.yaml).

Review item 3: the legacy pytorch package declares neither fsspec nor setuptools, and leaves sympy
unpinned, while its own torch metadata requires fsspec, setuptools (Python >= 3.12) and sympy==1.13.1
(PyPI's torch-2.5.1-cp312 METADATA; pytorch/builder conda/pytorch-nightly/meta.yaml), so the recipe's
`pip_check` fails in the environment a user gets. Review item 4: the same packages leave `mkl`
unbounded, and MKL >= 2024.1 breaks `import torch` (undefined symbol iJIT_NotifyEvent,
pytorch/pytorch#123097); PyPI's torch links MKL statically, so here the solve shows the fix.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from faforge.channel.local import PackageSpec, assemble, index, install, solve
from tests.support.standin_flash_attn import pinned_kernel_record

pytestmark = pytest.mark.slow

CELL = "linux-64/py312/torch2.5/cu121/abi0"


@pytest.fixture(scope="module")
def legacy_env(world, tmp_path_factory):
    """A user's environment for the legacy cell: our package (its rendered run requirements) + pip."""
    matrix = subprocess.run([sys.executable, "-m", "faforge", "matrix", "--json"], capture_output=True, text=True, check=True)
    cell = next(c for c in json.loads(matrix.stdout) if c["id"] == CELL)
    root = tmp_path_factory.mktemp("legacy")
    ours = root / "ours"
    assemble(PackageSpec("flash-attn", "2.8.3.post2", cell["build_string"], "linux-64", depends=tuple(cell["run_requirements"]),
                         constrains=tuple(cell["run_constraints"])), ours)
    assemble(pinned_kernel_record(cell["run_requirements"], "linux-64", cell["cuda"]), ours)  # the kernel build it pins
    index(ours)
    channels = [ours.as_uri(), world.url("pytorch"), world.url("nvidia"), world.url("conda-forge")]
    records = solve(channels, ["flash-attn", "pip"], "linux-64")
    prefix = root / "env"
    install(records, prefix, "linux-64", cache_dir=root / "pkgs")
    return records, prefix


def test_the_world_is_the_legacy_one(legacy_env):
    records, _ = legacy_env
    assert str(records["pytorch"].version) == "2.5.1" and str(records["pytorch"].build).startswith("py3.12_cuda12.1")
    assert str(records["pytorch-mutex"].build) == "cuda" and str(records["libcublas"].version).startswith("12.1")


def test_pip_check_passes_in_the_users_environment(legacy_env):
    _, prefix = legacy_env
    result = subprocess.run([str(prefix / "bin" / "python3.12"), "-m", "pip", "check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mkl_stays_below_2024_1(legacy_env):
    records, _ = legacy_env
    version = tuple(int(p) for p in str(records["mkl"].version).split(".")[:2])
    assert version < (2024, 1), f"mkl {records['mkl'].version} breaks import torch (pytorch/pytorch#123097)"
