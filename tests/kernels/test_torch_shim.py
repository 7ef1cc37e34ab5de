"""The kernel-TU torch shim agrees with real torch: same PhiloxCudaState layout, same unpack results,
and the check macros reach the extension's check function with the call site's file and line."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from faforge import paths
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

pytestmark = pytest.mark.slow

SHIM = paths.repo_root() / "scripts/faforge/kernels/torch_shim"
# Host-only stand-ins for the CUDA keywords, so g++ can compile torch's .cuh as plain C++.
PRELUDE = """#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <tuple>
#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
typedef struct CUstream_st* cudaStream_t;
"""
PROBE = """
int main() {
  at::PhiloxCudaState plain(7, 11);
  int64_t seed = 3, offset = 5;
  at::PhiloxCudaState graph(&seed, &offset, 2);
  auto [s1, o1] = at::cuda::philox::unpack(plain);
  auto [s2, o2] = at::cuda::philox::unpack(graph);
  std::printf("size=%zu align=%zu seed=%zu offset=%zu intragraph=%zu captured=%zu\\n",
              sizeof(at::PhiloxCudaState), alignof(at::PhiloxCudaState),
              offsetof(at::PhiloxCudaState, seed_), offsetof(at::PhiloxCudaState, offset_),
              offsetof(at::PhiloxCudaState, offset_intragraph_), offsetof(at::PhiloxCudaState, captured_));
  std::printf("unpack=%llu,%llu,%llu,%llu\\n", (unsigned long long)s1, (unsigned long long)o1,
              (unsigned long long)s2, (unsigned long long)o2);
}
"""


def run_probe(tmp_path: Path, name: str, includes: str, include_dirs: list[Path]) -> str:
    source = tmp_path / f"{name}.cpp"
    source.write_text(PRELUDE + includes + PROBE)
    exe = tmp_path / name
    subprocess.run(["g++", "-std=c++17", *(f"-I{d}" for d in include_dirs), str(source), "-o", str(exe)], check=True)
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def torch_include():
    if not shutil.which("g++"):
        pytest.skip("needs g++")
    try:
        env = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    return env.site_packages / "torch" / "include"


def test_philox_state_and_unpack_match_real_torch(tmp_path, torch_include):
    real = run_probe(
        tmp_path,
        "real",
        "#include <ATen/cuda/detail/PhiloxCudaStateRaw.cuh>\n#include <ATen/cuda/detail/UnpackRaw.cuh>\n",
        [torch_include],
    )
    shim = run_probe(
        tmp_path,
        "shim",
        "#include <ATen/cuda/CUDAGeneratorImpl.h>\n#include <ATen/cuda/detail/UnpackRaw.cuh>\n",
        [SHIM],
    )
    assert shim == real
    assert "unpack=7,11,3,7" in real


def test_check_macros_call_the_extension_with_the_call_site(tmp_path):
    if not shutil.which("g++"):
        pytest.skip("needs g++")
    try:
        cuda_include = cuda_home() / "include"
    except NoCudaToolkit as exc:
        pytest.skip(f"needs the CUDA headers: {exc}")
    source = tmp_path / "check.cpp"
    source.write_text("""#include <c10/cuda/CUDAException.h>
#include <cstdio>
namespace faforge_shim {
void cuda_check(int32_t err, const char* file, const char* function, uint32_t line) {
  std::printf("%d %s %s %u\\n", err, file, function, line);
}
}
static cudaError_t fails() { return cudaErrorInvalidValue; }
int main() {
  C10_CUDA_CHECK(fails());
}
""")
    exe = tmp_path / "check"
    # Compiled without linking libcudart: the shim itself must not pull in anything but the header.
    subprocess.run(["g++", "-std=c++17", f"-I{SHIM}", f"-I{cuda_include}", str(source), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(1), str(source), "main", "10"]
