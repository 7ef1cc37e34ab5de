"""The legacy cells (-c pytorch -c nvidia -c conda-forge, pre-C++11 ABI) in the conda world.

linux-64/py312/torch2.5/cu124/abi0 is built for real (the legacy cell): tests/conda_world/test_recipe_in_world.py
runs the whole chain for it (build, recipe tests, verify, publish, HTTP, install, import, doctor) as
for the CUDA 13.0 cell; here is what only this cell must prove: the compiler was the world's CUDA
12.4 (Debian's nvidia-cuda-toolkit, repackaged) down to every tool nvcc ran, and the ABI gate read
ABI 0 in both the binary and torch. Its cu121 sibling stays solve-only (tests/conda_world/world.yaml
says why): its run environment is checked below.

Unpinned metadata: the legacy pytorch package declares neither fsspec nor setuptools, and leaves sympy
unpinned, while its own torch metadata requires fsspec, setuptools (Python >= 3.12) and sympy==1.13.1
(PyPI's torch-2.5.1-cp312 METADATA; pytorch/builder conda/pytorch-nightly/meta.yaml), so the recipe's
`pip_check` fails in the environment a user gets. Unbounded MKL: the same packages leave `mkl`
unbounded, and MKL >= 2024.1 breaks `import torch` (undefined symbol iJIT_NotifyEvent,
pytorch/pytorch#123097); PyPI's torch links MKL statically, so here the solve shows the fix.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from faforge.channel.local import PackageSpec, assemble, index, solve
from tests.conda_world.cells import LEGACY
from tests.conda_world.world_cache import install_from_world
from tests.support.standin_flash_attn import pinned_kernel_record

pytestmark = pytest.mark.slow

CELL = "linux-64/py312/torch2.5/cu121/abi0"


@pytest.fixture(scope="module")
def legacy_env(world, tmp_path_factory):
    """A user's environment for the legacy cell: our package (its rendered run requirements) + pip."""
    matrix = subprocess.run(
        [sys.executable, "-m", "faforge", "matrix", "--json"], capture_output=True, text=True, check=True
    )
    cell = next(c for c in json.loads(matrix.stdout) if c["id"] == CELL)
    root = tmp_path_factory.mktemp("legacy")
    ours = root / "ours"
    assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            cell["build_string"],
            "linux-64",
            depends=tuple(cell["run_requirements"]),
            constrains=tuple(cell["run_constraints"]),
        ),
        ours,
    )
    assemble(pinned_kernel_record(cell["run_requirements"], "linux-64", cell["cuda"]), ours)  # the kernel build it pins
    index(ours)
    channels = [ours.as_uri(), world.url("pytorch"), world.url("nvidia"), world.url("conda-forge")]
    records = solve(channels, ["flash-attn", "pip"], "linux-64")
    prefix = root / "env"
    install_from_world(world, records, prefix)
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


@pytest.fixture(scope="module")
def legacy_build(build_in_world):
    built = build_in_world(LEGACY)
    assert built.result.returncode == 0, built.result.stdout[-2000:] + built.log[-6000:]
    return built


def test_only_the_worlds_cuda_12_4_compiled_it(legacy_build):
    """With the normal PATH, /usr/local/bin's CUDA 13.0 ptxas, fatbinary, nvlink and cudafe++ would run
    under a 12.4 nvcc whose profile misses them. The build script logs the nvcc and each tool `nvcc
    --dryrun` names, after checking each one's --version (faforge.backend.toolchain): all must be the
    build environment's (rattler-build writes its path as $BUILD_PREFIX in the log), CUDA 12.4."""
    log = legacy_build.log
    nvcc, release = re.search(r"\[build_flash_attn\] nvcc (\S+): CUDA (\S+)$", log, re.MULTILINE).groups()
    assert (nvcc, release) == ("$BUILD_PREFIX/bin/nvcc", "12.4")
    ran = dict(re.findall(r"\[build_flash_attn\]   runs (\S+) (\S+): ", log))
    assert set(ran) == {"cicc", "ptxas", "fatbinary", "nvlink", "cudafe++"}, ran
    assert all(path.startswith("$BUILD_PREFIX/bin/") for path in ran.values()), ran
    assert (
        len(
            re.findall(
                r"\[build_flash_attn\]   runs (?:ptxas|fatbinary|nvlink|cudafe\+\+) \S+: CUDA 12\.4$", log, re.MULTILINE
            )
        )
        == 4
    )


def test_the_abi_gate_reads_abi_0_in_the_binary_and_in_torch(legacy_build):
    log = legacy_build.log
    assert re.search(r"\] torch: 2\.5\.1\+cu124, CUDA 12\.4, x86_64, _GLIBCXX_USE_CXX11_ABI=0 in ", log), log[-4000:]
    assert re.search(r"\]   built for: x86_64 \(64-bit\), _GLIBCXX_USE_CXX11_ABI=0$", log, re.MULTILINE), log[-4000:]
    assert re.search(r"\] ABI gate passed: flash_attn_2_cuda\S* against .*\(_GLIBCXX_USE_CXX11_ABI=0, ", log)


def test_the_kernel_package_is_the_cu124_one(legacy_build):
    [kernels] = (legacy_build.out / "linux-64").glob("libflash-attn-kernels-*.conda")
    assert "-cu124_sm80_90ptx_philox32_" in kernels.name, kernels.name
