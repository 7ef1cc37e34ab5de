"""Against the real torch 2.14.1 (CUDA 13.0, cp311): a freshly built extension checks clean, and so
does the recipe-test gate; an extension built for an older torch's SetDevice is caught.

The torch venv is cached in the test cache's venvs/ (tests/support/torch_envs.py, ~5.5 GB from local disk).
The extension build (torch/extension.h + a one-kernel .cu for sm_80) takes 1-4 minutes, so its
result is cached under the test cache's abi/ keyed by the sources, torch and nvcc versions.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from faforge.abi import classify
from faforge.abi.check import check_path
from faforge.abi.demangle import demangle
from faforge.abi.elf import read_dynamic_symbols
from tests.abi import elf_fixtures as fx
from tests.abi.conftest import REPO, dlopen, validate
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.recipe_test_envs import recipe_test_site
from tests.support.torch_envs import TorchEnv, TorchEnvUnavailable, torch_env

pytestmark = pytest.mark.slow
TORCH = "2.14.1"
CACHE = cache_dir("abi")

SOURCES = {
    "ext.cpp": """
#include <torch/extension.h>
#include <c10/cuda/CUDAFunctions.h>
void launch_add_one(float* x, int n);
torch::Tensor add_one(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "add_one needs a CUDA tensor");
  c10::cuda::SetDevice(x.get_device());
  launch_add_one(x.data_ptr<float>(), static_cast<int>(x.numel()));
  return x;
}
std::string describe(const torch::Tensor& x) { return x.toString(); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("add_one", &add_one); m.def("describe", &describe); }
""",
    "kernel.cu": """
__global__ void add_one_kernel(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1; }
void launch_add_one(float* x, int n) { add_one_kernel<<<(n + 255) / 256, 256>>>(x, n); }
""",
    # Named like flash-attn's module so that the recipe-test gate finds it.
    "setup.py": """
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
setup(name="fixture", cmdclass={"build_ext": BuildExtension}, ext_modules=[CUDAExtension(
    "flash_attn_2_cuda", ["ext.cpp", "kernel.cu"],
    extra_compile_args={"cxx": ["-O0", "-std=c++20"],
                        "nvcc": ["-O0", "-std=c++20", "-gencode", "arch=compute_80,code=sm_80"]})])
""",
}


@pytest.fixture(scope="module")
def torch214() -> TorchEnv:
    try:
        return torch_env(TORCH)
    except TorchEnvUnavailable as exc:
        pytest.skip(f"torch {TORCH} is not installable here: {exc}")


@pytest.fixture(scope="module")
def gate_site(torch214) -> Path:
    """The packages the recipe's ABI-gate test installs (its `requirements: run:`), for torch214's python."""
    return recipe_test_site(torch214.python, "faforge.abi.gate")


@pytest.fixture(scope="module")
def real_extension(torch214) -> Path:
    try:
        toolkit = cuda_home()
    except NoCudaToolkit as exc:
        pytest.skip(f"the real torch extension has a CUDA kernel: {exc}")
    nvcc_version = subprocess.run([toolkit / "bin" / "nvcc", "--version"], capture_output=True, text=True).stdout
    digest = hashlib.sha256(repr((SOURCES, TORCH, nvcc_version)).encode()).hexdigest()[:16]
    out = CACHE / f"torch{TORCH}-ext-{digest}"
    built = sorted(out.glob("lib/flash_attn_2_cuda*.so"))
    if built:
        return built[0]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name, text in SOURCES.items():
        (out / name).write_text(text)
    env = {**os.environ, "CUDA_HOME": str(toolkit), "TORCH_CUDA_ARCH_LIST": "8.0", "MAX_JOBS": "2"}
    result = subprocess.run(
        [str(torch214.python), "setup.py", "build_ext", "--build-lib", "lib", "--build-temp", "tmp"],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
    )
    built = sorted(out.glob("lib/flash_attn_2_cuda*.so"))
    if result.returncode != 0 or not built:
        shutil.rmtree(out, ignore_errors=True)
        # The compiler's message comes before setuptools' traceback, which alone would fill the tail.
        compiler_output = (result.stdout + result.stderr).split("Traceback (most recent call last)")[0]
        pytest.fail(f"building the torch extension failed:\n{compiler_output[-4000:]}")
    return built[0]


def test_real_libc10_cuda_exports_setdevice_signed_char_bool(torch214):
    exports = read_dynamic_symbols(torch214.torch_lib / "libc10_cuda.so").exports()
    assert "_ZN3c104cuda9SetDeviceEab" in exports
    assert "_ZN3c104cuda9SetDeviceEa" not in exports and "_ZN3c104cuda9SetDeviceEi" not in exports
    assert demangle("_ZN3c104cuda9SetDeviceEab") == "c10::cuda::SetDevice(signed char, bool)"


def test_real_extension_checks_clean(real_extension, torch214):
    verdict = check_path(real_extension, [torch214.site_packages])
    module = verdict.modules[0]
    assert verdict.ok, module.problems
    assert module.unverified_libraries == () and module.unresolved_unverified == 0
    assert module.interpreter_symbols > 0
    assert (module.declared.cxx11_abi, module.declared.gpu.sass, module.declared.gpu.ptx) == (1, ("sm_80",), ())
    assert (verdict.torch.version, verdict.torch.cuda, verdict.torch.cxx11_abi) == ("2.14.1+cu130", "13.0", 1)
    assert {"libc10_cuda.so", "libtorch_cpu.so", "libtorch_python.so"} <= {lib.name for lib in module.libraries}
    validate(verdict.to_json())
    assert dlopen(real_extension, torch214.torch_lib)[0]


def test_extension_for_an_older_torch_is_caught(gxx, torch214, tmp_path):
    """Built against torch 2.1's c10::cuda::SetDevice(int): the real 2.14.1 only has (signed char, bool)."""
    ext = fx.compile_shared(
        gxx,
        "namespace c10::cuda { void SetDevice(int); }\nvoid use() { c10::cuda::SetDevice(0); }\n",
        tmp_path / "old_ext.so",
        defines={},
        flags=[f"-L{torch214.torch_lib}", "-Wl,--no-as-needed", "-lc10_cuda"],
    )
    verdict = check_path(ext, [torch214.site_packages])
    (problem,) = verdict.modules[0].problems
    assert (problem.kind, problem.symbol, problem.library) == (
        classify.SIGNATURE_DRIFT,
        "_ZN3c104cuda9SetDeviceEi",
        "libc10_cuda.so",
    )
    assert problem.offers == ("c10::cuda::SetDevice(signed char, bool)",)
    loaded, error = dlopen(ext, torch214.torch_lib)
    assert not loaded and "_ZN3c104cuda9SetDeviceEi" in error


@pytest.mark.parametrize(
    ("abi", "archs", "code"),
    [
        ("1", "sm_80", 0),
        ("1", "80", 0),
        ("1", "sm_80,sm_90", 1),
        ("0", "sm_80", 1),
        ("1", "80+PTX", 1),
    ],
)
def test_recipe_gate(real_extension, torch214, gate_site, abi, archs, code):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (real_extension.parent, REPO / "scripts", gate_site)))}
    result = subprocess.run(
        [str(torch214.python), "-m", "faforge.abi.gate", "--expect-cxx11-abi", abi, "--expect-archs", archs],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == code, result.stdout + result.stderr
    assert ("ABI gate passed" if code == 0 else "ABI gate FAILED") in result.stdout


def test_recipe_gate_without_the_module(torch214, gate_site, tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'scripts'}{os.pathsep}{gate_site}"}
    result = subprocess.run(
        [str(torch214.python), "-m", "faforge.abi.gate", "--expect-cxx11-abi", "1", "--expect-archs", "sm_80"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "no flash_attn_2_cuda*.so" in result.stderr and "Traceback" not in result.stderr
