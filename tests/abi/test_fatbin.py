"""GPU architectures read from .nv_fatbin match what nvcc was asked for and what cuobjdump lists."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from faforge.abi.fatbin import GpuArchs, read_gpu_archs
from tests.support.tiers import slow

NVCC = shutil.which("nvcc")
KERNEL = """
__global__ void add(float* x, float y) { x[threadIdx.x] += y; }
extern "C" void launch(float* x) { add<<<1, 32>>>(x, 1.0f); }
"""
# name -> (nvcc flags, expected SASS, expected PTX)
BUILDS = {
    "ampere-hopper": (
        [
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90a,code=sm_90a",
            "-gencode",
            "arch=compute_90,code=compute_90",
        ],
        ("sm_80", "sm_90a"),
        ("compute_90",),
    ),
    "blackwell-variants": (
        [
            "-gencode",
            "arch=compute_100f,code=sm_100f",
            "-gencode",
            "arch=compute_100a,code=sm_100a",
            "-gencode",
            "arch=compute_120,code=sm_120",
            "-gencode",
            "arch=compute_120a,code=compute_120a",
        ],
        ("sm_100a", "sm_100f", "sm_120"),
        ("compute_120a",),
    ),
    "compressed": (
        [
            "-Xfatbin=-compress-all",
            "-gencode",
            "arch=compute_80,code=[sm_80,compute_80]",
            "-gencode",
            "arch=compute_86,code=sm_86",
        ],
        ("sm_80", "sm_86"),
        ("compute_80",),
    ),
}


def cuobjdump() -> str | None:
    """cuobjdump from PATH or from PyPI's nvidia-cuda-cuobjdump (a test extra)."""
    if shutil.which("cuobjdump"):
        return shutil.which("cuobjdump")
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob("cu*/bin/cuobjdump")):
            return str(candidate)
    return None


@pytest.fixture(scope="module")
@slow("nvcc compiles")
def fatbins(tmp_path_factory) -> dict[str, Path]:
    if NVCC is None:
        pytest.skip("nvcc is not on PATH; the fatbin fixtures are compiled with it")
    folder = tmp_path_factory.mktemp("fatbin")
    (folder / "k.cu").write_text(KERNEL)
    built = {}
    for name, (flags, _, _) in BUILDS.items():
        out = folder / f"{name}.so"
        subprocess.run(
            [NVCC, "-shared", "-Xcompiler", "-fPIC", "-o", str(out), str(folder / "k.cu"), *flags],
            check=True,
            capture_output=True,
            text=True,
        )
        built[name] = out
    return built


@pytest.mark.parametrize("name", BUILDS)
def test_archs_match_the_nvcc_flags(fatbins, name):
    _, sass, ptx = BUILDS[name]
    assert read_gpu_archs(fatbins[name]) == GpuArchs(sass, ptx)


@pytest.mark.parametrize("name", BUILDS)
def test_archs_match_cuobjdump(fatbins, name):
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump is missing (pip install nvidia-cuda-cuobjdump, part of faforge's test extras)")
    out = subprocess.run([tool, str(fatbins[name])], capture_output=True, text=True, check=True).stdout
    sass = set(re.findall(r"Fatbin elf code:\n=+\narch = (\S+)", out))
    ptx = {a.replace("sm_", "compute_") for a in re.findall(r"Fatbin ptx code:\n=+\narch = (\S+)", out)}
    archs = read_gpu_archs(fatbins[name])
    assert (set(archs.sass), set(archs.ptx)) == (sass, ptx)


def test_cpu_only_library_has_no_gpu_code(stand_ins):
    archs = read_gpu_archs(next(iter(stand_ins.values())) / "libc10_cuda.so")
    assert archs == GpuArchs((), ()) and not archs
