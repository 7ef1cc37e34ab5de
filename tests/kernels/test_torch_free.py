"""`faforge check-abi --torch-free` (the kernel library): a binary that must not touch torch, Python or the C++ ABI.

Fixtures are real ELF files built here: a tiny CUDA library made like the kernel library (nvcc, shared
cudart, a version script exporting only run_mha_* and flash_attn_kernels_*, std::string used inside),
and g++ libraries that each break one rule. Real binaries nobody here built: NVIDIA's libcurand
(GPU code for 11 archs) and libcudart must pass; torch's own libc10_cuda.so must fail. They are read
out of their PyPI wheels by HTTP range requests (faforge.wheelfetch, wheel sha256 pinned and checked
against PyPI's listing, member CRC-32 checked) into the test cache's nvidia-libs/ and torch-libs/
(libcurand is 63 MB compressed, downloaded once).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from faforge.errors import FaforgeError
from faforge.kernels import torchfree
from faforge.wheelfetch import fetch_member
from tests.abi.conftest import REPO, run_faforge
from tests.support.cache import cache_dir
from tests.support.pypi import pypi_listing
from tests.support.tiers import slow

SCHEMA = json.loads((REPO / "tests" / "schemas" / "check-abi-torch-free.json").read_text())
EXPORTS = "run_mha_*,flash_attn_kernels_*"
VERSION_SCRIPT = """{
  global: extern "C++" { flash::run_mha_*; }; flash_attn_kernels_*;
  local: *;
};
"""
KERNEL_LIBRARY = r"""
#include <cuda_runtime.h>
#include <stdexcept>
#include <string>
namespace flash {
static void (*handler)(const char*) = nullptr;
__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.f; }
static void check(cudaError_t err) {  // the library's own error path: no torch
  if (err != cudaSuccess) {
    std::string what = std::string("CUDA error: ") + cudaGetErrorString(err);
    if (handler) handler(what.c_str());
    throw std::runtime_error(what);
  }
}
void run_mha_fwd_demo(float* x, int n, cudaStream_t stream) {
  scale<<<(n + 127) / 128, 128, 0, stream>>>(x, n);
  check(cudaGetLastError());
}
}  // namespace flash
extern "C" void flash_attn_kernels_set_cuda_error_handler(void (*h)(const char*)) { flash::handler = h; }
"""
# name -> (source, g++ flags, what the check must find); each breaks one rule.
BROKEN = {
    "returns_string_abi1": (
        '#include <string>\nnamespace flash { std::string run_mha_name() { return "fwd"; } }\n',
        ["-D_GLIBCXX_USE_CXX11_ABI=1"],
        torchfree.ABI_DEPENDENT_EXPORT,
    ),
    "takes_string_abi1": (
        "#include <string>\nnamespace flash { int run_mha_named(const std::string& s) { return s.size(); } }\n",
        ["-D_GLIBCXX_USE_CXX11_ABI=1"],
        torchfree.ABI_DEPENDENT_EXPORT,
    ),
    "takes_string_abi0": (
        "#include <string>\nnamespace flash { int run_mha_named(const std::string& s) { return s.size(); } }\n",
        ["-D_GLIBCXX_USE_CXX11_ABI=0"],
        torchfree.ABI_DEPENDENT_EXPORT,
    ),
    "c10_import": (
        "namespace c10 { void warn_once(int); }\nnamespace flash { void run_mha_fwd() { c10::warn_once(1); } }\n",
        [],
        torchfree.TORCH_SYMBOL,
    ),
    "python_import": (
        'extern "C" int Py_IsInitialized();\nnamespace flash { int run_mha_fwd() { return Py_IsInitialized(); } }\n',
        [],
        torchfree.TORCH_SYMBOL,
    ),
    "needs_libc10": (
        "namespace flash { void run_mha_fwd() {} }\n",
        ["-Wl,--no-as-needed", "-lc10"],
        torchfree.TORCH_LIBRARY,
    ),
}


def validated(report: dict) -> dict:
    jsonschema.validate(report, SCHEMA)
    return report


@pytest.fixture(scope="module")
def gxx() -> str:
    found = shutil.which("g++")
    if not found:
        pytest.skip("g++ is not installed; the fixtures are compiled with it")
    return found


def gxx_shared(gxx: str, out: Path, source: str, flags: list[str], *, version_script: bool = True) -> Path:
    src = out.with_suffix(".cpp")
    src.write_text(source)
    script = out.with_suffix(".map")
    script.write_text(VERSION_SCRIPT)
    command = [gxx, "-shared", "-fPIC", "-O1", "-o", str(out), str(src), f"-L{out.parent}"]
    subprocess.run(command + ([f"-Wl,--version-script={script}"] if version_script else []) + flags, check=True)
    return out


@pytest.fixture(scope="module")
@slow("an nvcc compile")
def kernel_library(tmp_path_factory) -> Path:
    """Built like libflash_attn_kernels.so: sm_80 + sm_90 SASS, compute_90 PTX, -cudart shared, --no-undefined."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH; the kernel-library stand-in is compiled with it")
    folder = tmp_path_factory.mktemp("kernel-lib")
    (folder / "kernels.cu").write_text(KERNEL_LIBRARY)
    (folder / "kernels.map").write_text(VERSION_SCRIPT)
    out = folder / "libflash_attn_kernels.so"
    subprocess.run(
        [
            nvcc,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-cudart",
            "shared",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-gencode",
            "arch=compute_90,code=[sm_90,compute_90]",
            f"-Xlinker=--version-script={folder / 'kernels.map'}",
            "-Xlinker=--no-undefined",
            "-o",
            str(out),
            str(folder / "kernels.cu"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@pytest.fixture(scope="module")
def broken(tmp_path_factory, gxx) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("broken")
    gxx_shared(gxx, folder / "libc10.so", "namespace c10 { int version() { return 1; } }\n", [], version_script=False)
    return {
        name: gxx_shared(gxx, folder / f"lib{name}.so", source, flags) for name, (source, flags, _) in BROKEN.items()
    }


@pytest.mark.slow
def test_a_library_built_like_the_kernel_library_passes(kernel_library):
    report = torchfree.check_torch_free(kernel_library, expect_archs="80;90+PTX", exports=EXPORTS)
    assert report.ok, torchfree.render_text(report)
    assert "libcudart.so.13" in report.needed or any(n.startswith("libcudart.so") for n in report.needed)
    assert report.exports == 2  # run_mha_fwd_demo and the error-handler setter; std::string stayed inside
    assert (report.gpu.sass, report.gpu.ptx) == (("sm_80", "sm_90"), ("compute_90",))


@pytest.mark.slow
@pytest.mark.parametrize(
    "archs, wrong", [("80;90;100;120+PTX", ["SASS", "PTX"]), ("80;90", ["PTX"]), ("90+PTX", ["SASS"])]
)
def test_gpu_code_must_match_the_arch_list(kernel_library, archs, wrong):
    report = torchfree.check_torch_free(kernel_library, expect_archs=archs)
    assert [(p.kind, p.subject) for p in report.problems] == [(torchfree.GPU_ARCHS, w) for w in wrong]


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_rule_is_found(broken, name):
    report = torchfree.check_torch_free(broken[name], exports=EXPORTS)
    assert not report.ok
    assert {p.kind for p in report.problems} == {BROKEN[name][2]}, torchfree.render_text(report)


def test_abi_dependent_export_names_the_abi(broken):
    """Under ABI 1 a returned std::string shows as the [abi:cxx11] tag; under ABI 0 only a parameter shows
    (`Ss`): a function returning an old-ABI std::string has no mark in its name, so no symbol check sees it."""
    returned = torchfree.check_torch_free(broken["returns_string_abi1"]).problems
    new = torchfree.check_torch_free(broken["takes_string_abi1"]).problems
    old = torchfree.check_torch_free(broken["takes_string_abi0"]).problems
    assert returned[0].demangled == "flash::run_mha_name[abi:cxx11]()"
    assert "std::__cxx11::basic_string" in new[0].demangled and "_GLIBCXX_USE_CXX11_ABI=1" in new[0].detail
    assert old[0].subject == "_ZN5flash13run_mha_namedERKSs" and "_GLIBCXX_USE_CXX11_ABI=0" in old[0].detail


def test_exports_outside_the_allowlist_fail_only_with_an_allowlist(gxx, tmp_path):
    lib = gxx_shared(
        gxx,
        tmp_path / "libleaky.so",
        "namespace flash { void run_mha_fwd() {} }\nint internal_helper() { return 1; }\n",
        [],
        version_script=False,
    )
    assert torchfree.check_torch_free(lib).ok
    problems = torchfree.check_torch_free(lib, exports=EXPORTS).problems
    assert [(p.kind, p.demangled) for p in problems] == [(torchfree.UNEXPECTED_EXPORT, "internal_helper()")]


def test_cli_exit_codes_and_json(broken, gxx, tmp_path):
    good = gxx_shared(gxx, tmp_path / "libgood.so", "namespace flash { void run_mha_fwd() {} }\n", [])
    passed = run_faforge("check-abi", "--torch-free", good, "--exports", EXPORTS, "--json")
    assert passed.returncode == 0, passed.stderr
    assert validated(json.loads(passed.stdout))["ok"] is True
    failed = run_faforge("check-abi", "--torch-free", broken["c10_import"], "--json")
    assert failed.returncode == 1
    assert validated(json.loads(failed.stdout))["problems"][0]["demangled"] == "c10::warn_once(int)"
    text = run_faforge("check-abi", "--torch-free", broken["needs_libc10"])
    assert (
        text.returncode == 1
        and "torch-library: libc10.so" in text.stdout
        and "fails the torch-free check" in text.stdout
    )


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--torch-free", "/no/such/lib.so"], "no such file"),
        (["--torch-free", "--against", "/tmp", "LIB"], "drop --against"),
        (["--torch-free", "--expect-archs", "sm_eighty", "LIB"], "--expect-archs"),
        (["--torch-free", "--exports", " , ", "LIB"], "--exports"),
        (["LIB"], "--against DIR"),
        (["--against", "/tmp", "--exports", "run_mha_*", "LIB"], "go with --torch-free"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(gxx, tmp_path, args, fragment):
    lib = gxx_shared(gxx, tmp_path / "liblib.so", "namespace flash { void run_mha_fwd() {} }\n", [])
    result = run_faforge("check-abi", *(str(lib) if a == "LIB" else a for a in args))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and fragment in result.stderr, result.stderr


# -- real binaries nobody here built ----------------------------------------------------------------
# (project, wheel, sha256 as PyPI lists it, member, cache folder)
LIBCURAND = (
    "nvidia-curand-cu12",
    "nvidia_curand_cu12-10.3.9.90-py3-none-manylinux_2_27_x86_64.whl",
    "b32331d4f4df5d6eefa0554c565b626c7216f87a06a4f56fab27c3b68a830ec9",
    "nvidia/curand/lib/libcurand.so.10",
    "nvidia-libs",
)
LIBCUDART = (
    "nvidia-cuda-runtime-cu12",
    "nvidia_cuda_runtime_cu12-12.9.79-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
    "25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3",
    "nvidia/cuda_runtime/lib/libcudart.so.12",
    "nvidia-libs",
)
LIBC10_CUDA = (
    "torch",
    "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
    "60fcdcb2f3876e21146cb4524ef06397d727ca9ad5f020818547e25075fe3cb7",
    "torch/lib/libc10_cuda.so",
    "torch-libs",
)


def real(spec) -> Path:
    project, wheel, sha256, member, cache = spec
    cached = cache_dir(cache) / wheel / member
    if cached.is_file():
        return cached
    remote = pypi_listing(project)[wheel]
    assert remote.sha256 == sha256, f"{wheel}: PyPI lists sha256 {remote.sha256}, pinned {sha256}"
    return fetch_member(remote, member, cache_dir(cache))


@pytest.mark.slow
def test_nvidias_libcurand_and_libcudart_are_torch_free():
    curand = torchfree.check_torch_free(real(LIBCURAND))
    assert curand.ok, torchfree.render_text(curand)
    assert {"sm_80", "sm_90", "sm_120"} <= set(curand.gpu.sass) and curand.gpu.ptx == ("compute_120",)
    assert not torchfree.check_torch_free(real(LIBCURAND), expect_archs="80;90;100;120+PTX").ok  # it has more SASS
    cudart = torchfree.check_torch_free(real(LIBCUDART))
    assert cudart.ok and cudart.exports > 300, torchfree.render_text(cudart)


@pytest.mark.slow
def test_torchs_libc10_cuda_is_not():
    report = torchfree.check_torch_free(real(LIBC10_CUDA))
    kinds = {p.kind for p in report.problems}
    # torch 2.13 is C++11 ABI, and libc10_cuda.so exports std::unordered_map<std::string, ...> members
    assert kinds == {torchfree.TORCH_LIBRARY, torchfree.TORCH_SYMBOL, torchfree.ABI_DEPENDENT_EXPORT}
    assert [p.subject for p in report.problems if p.kind == torchfree.TORCH_LIBRARY] == ["libc10.so"]
    demangled = [p.demangled for p in report.problems if p.kind == torchfree.TORCH_SYMBOL]
    assert any(d.startswith("c10::cuda::") for d in demangled) and len(demangled) > 100
    assert validated(report.to_json())["ok"] is False


def test_a_bad_arch_list_is_bad_input(broken):
    with pytest.raises(FaforgeError, match="--expect-archs"):
        torchfree.check_torch_free(broken["c10_import"], expect_archs="ninety")


def test_schema_names_every_kind():
    assert (
        tuple(SCHEMA["$defs"]["report"]["properties"]["problems"]["items"]["properties"]["kind"]["enum"])
        == torchfree.KINDS
    )
