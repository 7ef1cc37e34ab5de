"""`faforge doctor` on real virtualenvs: pyenv interpreters, real torch wheels, extensions built here.

Each case installs a flash_attn_2_cuda compiled in the test beside a torch it was not built for, so the
import fails with the very error of the seed reports, and asserts the diagnosis and the fix.
"""

from __future__ import annotations

import shutil

import pytest

from faforge.matrix import load_matrix
from faforge.versions import vtuple
from tests.doctor import envs

pytestmark = pytest.mark.slow

# The pip cell of the cached torch 2.14.1 (PyPI's, CUDA 13.0, cp311) and its glue wheel's version.
CELL_2_14 = "pypi/linux-64/py311/torch2.14/cu130/abi1"
GLUE_2_14 = "2.8.3.post2+torch2.14.cu130.abi1"

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed to build the test extensions")


def test_venv_without_torch(run_doctor, tmp_path):
    base = envs.pyenv_python("3.12")
    if base is None:
        pytest.skip("pyenv has no Python 3.12 here")
    python = envs.venv(tmp_path / "venv", base)
    result = run_doctor("--python", python)
    assert result.code == 1
    assert result.kinds() == ["torch-missing", "flash-attn-missing"]
    assert result.report["facts"]["torch"]["installed"] is False
    assert (
        result.report["facts"]["python"]["environment"] == "venv" and result.report["facts"]["python"]["pip"] is False
    )
    fix = result.fix(
        "pip-install"
    )  # PyPI's newest torch for this python and its wheel, in one line; never a conda line
    newest = max(
        (c for c in load_matrix().pip_cells if c.platform == "linux-64" and c.python == "3.12"),
        key=lambda c: vtuple(c.torch),
    )
    assert fix["cell"] == newest.id and fix["index_url"].endswith(f"/{newest.index_name}/")
    assert fix["commands"][0] == f"{python} -m ensurepip"
    assert fix["commands"][1].endswith(
        f" torch=={newest.torch} flash-attn==2.8.3.post2+torch{newest.torch_minor}.{newest.cuda_tag}.abi1"
    )
    assert not [f for f in result.report["fixes"] if f["kind"].startswith("conda")]


@needs_gxx
def test_healthy_environment(run_doctor, cuda_overlay, real_extension, tmp_path):
    envs.install_flash_attn(cuda_overlay, real_extension(1), tmp_path)
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 0, result.report["problems"]
    assert result.kinds() == [] and result.report["healthy"] is True
    assert result.report["fixes"] == []
    facts = result.report["facts"]
    assert facts["import"]["ok"] is True
    assert facts["flash_attn"]["how"] == "pip"
    binary = facts["flash_attn"]["binary"]
    assert binary["cxx11_abi"] == 1 and binary["cudart_majors"] == [13]
    assert binary["built_for"]["words"].startswith("torch 2.14 or newer")
    assert facts["abi_gate"]["ok"] is True


@needs_gxx
def test_signature_drift_setdevice_int(run_doctor, cuda_overlay, torch_cuda, builds, tmp_path):
    """Seed reports 000, 001, 003: `undefined symbol: _ZN3c104cuda9SetDeviceEi` with a newer torch."""
    stub = envs.standin_c10(builds / "torch-2.2-libs", cxx11_abi=1, set_device="int")
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        cuda_overlay,
        [envs.SET_DEVICE["int"]],
        (f"-L{stub}", "-lc10_cuda"),
    )
    envs.install_flash_attn(cuda_overlay, ext, tmp_path, "2.3.3")
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert result.report["facts"]["import"]["error"]["message"].endswith("undefined symbol: _ZN3c104cuda9SetDeviceEi")
    assert result.kinds() == ["signature-drift"]
    problem = result.problem("signature-drift")
    assert problem["message"] == (
        "this flash-attn was built for torch 2.1-2.2 (it imports c10::cuda::SetDevice(int)); "
        "your torch 2.14.1+cu130 exports c10::cuda::SetDevice(signed char, bool)"
    )
    fix = result.fix("pip-install")
    assert fix["cell"] == CELL_2_14 and fix["resolves"] == ["signature-drift"]
    assert fix["commands"][0] == f"{cuda_overlay} -m pip uninstall -y flash-attn"
    assert fix["commands"][1] == (
        f"{cuda_overlay} -m pip install --extra-index-url {fix['index_url']} --only-binary flash-attn "
        f"torch==2.14.1 flash-attn=={GLUE_2_14}"
    )


@needs_gxx
def test_pre_cxx11_abi_binary_with_cxx11_torch(run_doctor, cuda_overlay, real_extension, tmp_path):
    """An ABI-0 build (upstream's cxx11abiFALSE wheels) beside a pip torch, which is ABI 1 since 2.7."""
    ext = real_extension(0)
    envs.install_flash_attn(cuda_overlay, ext, tmp_path, "2.8.3+cu13torch2.14cxx11abiFALSE")
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert "_ZN3c105ErrorC2ENS_14SourceLocationESs" in result.report["facts"]["import"]["error"]["message"]
    assert result.kinds() == ["cxx11-abi-mismatch"]
    problem = result.problem("cxx11-abi-mismatch")
    assert problem["message"] == (
        "flash-attn was built with the pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0); your torch "
        "2.14.1+cu130 uses the C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1)"
    )
    assert result.report["facts"]["flash_attn"]["claim"]["cxx11_abi"] == 0
    fix = result.fix("pip-install")  # the ABI-1 wheel of PyPI's torch 2.14 (ABI 1 since 2.7)
    assert fix["cell"] == CELL_2_14 and fix["commands"][-1].endswith(f"flash-attn=={GLUE_2_14}")


@needs_gxx
def test_extension_for_another_python(run_doctor, cuda_overlay, real_extension, tmp_path):
    envs.install_flash_attn(
        cuda_overlay, real_extension(1), tmp_path, name=f"{envs.EXTENSION}.cpython-310-x86_64-linux-gnu.so"
    )
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert result.kinds() == ["python-tag-mismatch"]
    assert "cpython-310" in result.problem("python-tag-mismatch")["message"]
    assert "*.cpython-311-x86_64-linux-gnu.so" in result.problem("python-tag-mismatch")["message"]
    assert result.fix("pip-install")["resolves"] == ["python-tag-mismatch"]


@needs_gxx
def test_cuda_12_binary_with_cuda_13_torch(run_doctor, cuda_overlay, torch_cuda, builds, tmp_path):
    cudart = envs.standin_cudart(builds / "cuda12", 12).parent
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        cuda_overlay,
        [envs.SET_DEVICE["char_bool"], envs.CUDART],
        (f"-L{torch_cuda.torch_lib}", "-lc10_cuda", f"-L{cudart}", "-l:libcudart.so.12"),
    )
    envs.install_flash_attn(cuda_overlay, ext, tmp_path, "2.8.3+cu12torch2.14cxx11abiTRUE")
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert "libcudart.so.12: cannot open shared object file" in result.report["facts"]["import"]["error"]["message"]
    assert result.kinds() == ["cuda-major-mismatch"]
    assert result.problem("cuda-major-mismatch")["message"] == (
        "flash-attn was built for CUDA 12 (it needs libcudart.so.12); your torch 2.14.1+cu130 uses CUDA 13.0"
    )


@needs_gxx
def test_binary_needing_a_newer_glibc(run_doctor, cuda_overlay, builds, tmp_path):
    libc = envs.standin_libc(builds / "glibc-2.99")
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}.cpython-311-x86_64-linux-gnu.so",
        cuda_overlay,
        [envs.NEW_GLIBC],
        (str(libc),),
    )
    envs.install_flash_attn(cuda_overlay, ext, tmp_path)
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert "version `GLIBC_2.99' not found" in result.report["facts"]["import"]["error"]["message"]
    assert result.kinds() == ["glibc-too-old"]
    system = result.report["facts"]["system"]["glibc"]
    assert result.problem("glibc-too-old")["message"] == (
        f"flash-attn's binary needs glibc 2.99 (GLIBC_2.99); this system has glibc {system}"
    )


@needs_gxx
def test_cpu_torch_with_a_cuda_build(run_doctor, torch_cpu, real_extension, tmp_path):
    """torch 2.13.0+cpu (a real wheel) with flash-attn built for the CUDA torch: libc10_cuda.so is missing."""
    python = envs.overlay(tmp_path / "venv", torch_cpu.python, torch_cpu.site_packages)
    envs.install_flash_attn(python, real_extension(1), tmp_path)
    result = run_doctor("--python", python)
    assert result.code == 1
    assert "libc10_cuda.so: cannot open shared object file" in result.report["facts"]["import"]["error"]["message"]
    assert result.kinds() == ["cpu-only-torch"]
    assert result.problem("cpu-only-torch")["message"].startswith("torch 2.13.0+cpu is a CPU-only build")
    pip = result.fix("pip")
    assert pip["commands"][0].endswith("-m pip install --force-reinstall torch==2.13.0")
    wheel = result.fix("pip-install")  # then the wheel of PyPI's (CUDA) torch 2.13
    assert wheel["cell"] == "pypi/linux-64/py311/torch2.13/cu130/abi1"
    assert wheel["commands"][-1].endswith(" torch==2.13.0 flash-attn==2.8.3.post2+torch2.13.cu130.abi1")
