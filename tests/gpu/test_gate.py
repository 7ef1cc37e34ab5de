"""The GPU gate on this machine (no GPU) and its readers on real binaries built here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.gpu.compat import JIT, NATIVE, NONE, check
from faforge.gpu.gate import (
    DECLARED_ARCHS_ENV,
    DECLARED_HEAD_DIMS_ENV,
    Gate,
    built_head_dims,
    judge_binary,
    parse_declared_archs,
    read_embedded_archs,
)
from faforge.kernels.tus import HEAD_DIMS
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
GATE_JSON = "import json; from faforge.gpu.gate import evaluate; print(json.dumps(evaluate().to_json()))"
# Host functions named like flash-attn's (csrc/flash_attn/src/flash_fwd_launch_template.h, run_mha_fwd_<T, D, causal>),
# with stand-in types: the mangled names are what the gate reads the compiled head dims from.
FWD_KERNELS = """
namespace cutlass { struct half_t {}; struct bfloat16_t {}; }
struct Flash_fwd_params {};
struct CUstream_st;
template <typename T, int Headdim, bool Is_causal> void run_mha_fwd_(Flash_fwd_params &params, CUstream_st *stream);
template <> void run_mha_fwd_<cutlass::half_t, 64, false>(Flash_fwd_params &, CUstream_st *) {}
template <> void run_mha_fwd_<cutlass::half_t, 64, true>(Flash_fwd_params &, CUstream_st *) {}
template <> void run_mha_fwd_<cutlass::bfloat16_t, 192, false>(Flash_fwd_params &, CUstream_st *) {}
"""
KERNEL = "__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n"


def gate_in(python: Path, *prelude: str) -> dict:
    code = "; ".join([*prelude, GATE_JSON])
    result = subprocess.run(
        [str(python), "-c", code], env={"PYTHONPATH": str(SCRIPTS)}, capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


def test_closed_without_torch_and_says_so():
    gate = gate_in(Path(sys.executable), "import sys", "sys.modules['torch'] = None")  # makes `import torch` fail
    assert gate["usable"] is False
    assert gate["reason"].startswith("torch is not importable")


@pytest.mark.slow  # a CUDA torch venv
def test_closed_with_cuda_torch_but_no_device():
    try:
        env = torch_env("2.14.1")  # CUDA 13.0 build, from this machine's disk; shared with the ABI tests
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    gate = gate_in(env.python)
    assert gate["usable"] is False
    assert gate["reason"] == "no CUDA device visible to torch 2.14.1+cu130 (CUDA 13.0)"
    assert (gate["torch"], gate["torch_cuda"]) == ("2.14.1+cu130", "13.0")


def test_to_json_of_an_open_gate():
    verdict = check((9, 0), ("sm_90",), ())
    gate = Gate(True, "ok", device="NVIDIA H200", capability=(9, 0), compat=verdict, head_dims=(64, 128))
    data = gate.to_json()
    assert data["capability"] == [9, 0] and data["head_dims"] == [64, 128]
    assert data["compat"] == {
        "gpu": "sm_90",
        "status": NATIVE,
        "sass": ["sm_90"],
        "ptx": [],
        "matching": ["sm_90"],
        "message": verdict.message,
    }


@pytest.mark.slow  # g++ compiles
def test_head_dims_read_from_exported_kernel_symbols(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed; the stand-in extension is compiled with it")
    (tmp_path / "fwd.cpp").write_text(FWD_KERNELS)
    subprocess.run([gxx, "-shared", "-fPIC", "-o", tmp_path / "ext.so", tmp_path / "fwd.cpp"], check=True)
    assert built_head_dims(tmp_path / "ext.so") == (64, 192)
    subprocess.run(
        [gxx, "-shared", "-fPIC", "-o", tmp_path / "other.so", "-x", "c++", "-"],
        input=b"int f() { return 1; }",
        check=True,
    )
    assert built_head_dims(tmp_path / "other.so") == ()


@pytest.fixture(scope="module")
def sm80_binaries(tmp_path_factory) -> dict[str, Path]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH; the sm_80 fixtures are compiled with it")
    folder = tmp_path_factory.mktemp("sm80")
    (folder / "k.cu").write_text(KERNEL)
    builds = {"sass": "arch=compute_80,code=sm_80", "ptx": "arch=compute_80,code=compute_80"}
    for name, gencode in builds.items():
        subprocess.run(
            [nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", gencode, "-o", folder / f"{name}.so", folder / "k.cu"],
            check=True,
        )
    return {name: folder / f"{name}.so" for name in builds}


def test_compat_of_an_sm80_sass_binary(sm80_binaries):
    archs = read_embedded_archs(sm80_binaries["sass"])
    assert archs == (("sm_80",), ())
    assert check((8, 6), *archs).status == NATIVE
    hopper = check((9, 0), *archs)
    assert hopper.status == NONE
    assert "sm_90" in hopper.message and "sm_80" in hopper.message


def test_compat_of_a_ptx_only_binary(sm80_binaries):
    archs = read_embedded_archs(sm80_binaries["ptx"])
    assert archs == ((), ("compute_80",))
    assert check((9, 0), *archs).status == JIT
    assert check((7, 5), *archs).status == NONE


def test_no_code_for_a_gpu_the_package_declares_is_a_defect_not_a_skip(sm80_binaries, monkeypatch):
    archs = read_embedded_archs(sm80_binaries["sass"])
    found = {"capability": (9, 0), "device": "NVIDIA H200", "extension": str(sm80_binaries["sass"])}
    monkeypatch.setenv(DECLARED_ARCHS_ENV, "80;90")
    gate = judge_binary("NVIDIA H200 (sm_90)", found, HEAD_DIMS, archs)
    assert not gate.usable
    assert gate.defects == (
        f"the package declares sm_80, sm_90, which covers sm_90, but {check((9, 0), *archs).message}",
    )
    monkeypatch.setenv(DECLARED_ARCHS_ENV, "80")  # the package never claimed sm_90: nothing verified, no defect
    gate = judge_binary("NVIDIA H200 (sm_90)", found, HEAD_DIMS, archs)
    assert not gate.usable and gate.defects == ()
    monkeypatch.setenv(DECLARED_ARCHS_ENV, "80+PTX")  # PTX for compute_80 covers sm_90 by JIT: then it must be there
    assert judge_binary("NVIDIA H200 (sm_90)", found, HEAD_DIMS, archs).defects != ()


def test_declared_head_dims_missing_from_the_binary_are_a_defect(tmp_path, monkeypatch):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed; the stand-in extension is compiled with it")
    (tmp_path / "fwd.cpp").write_text(FWD_KERNELS)
    subprocess.run([gxx, "-shared", "-fPIC", "-o", tmp_path / "ext.so", tmp_path / "fwd.cpp"], check=True)
    found = {"capability": (9, 0), "extension": str(tmp_path / "ext.so")}
    built = built_head_dims(tmp_path / "ext.so")
    gate = judge_binary("GPU", found, built, (("sm_90",), ()))
    assert gate.usable and gate.head_dims == HEAD_DIMS  # the suite still tests every declared dim
    assert gate.defects == (
        "head dims [32, 96, 128, 256] declared but ext.so has no forward kernels for them (it has [64, 192])",
    )
    monkeypatch.setenv(DECLARED_HEAD_DIMS_ENV, "64,192")
    assert judge_binary("GPU", found, built, (("sm_90",), ())).defects == ()


def test_declared_archs_parse_like_the_build_scripts_arch_list():
    assert parse_declared_archs("80;90;120+PTX") == (("sm_80", "sm_90", "sm_120"), ("compute_120",))
    assert parse_declared_archs("sm_90a") == (("sm_90a",), ())
    with pytest.raises(ValueError, match="'ninety' is not an arch"):
        parse_declared_archs("80;ninety")
