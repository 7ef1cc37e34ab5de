"""doctor on a venv whose torch/lib is linked from a store (the untrusted-input rules): as a symlink per file, which
loads, or as one directory symlink, which does not, because the kernel resolves the `..` of torch's
RUNPATH `$ORIGIN/../../nvidia/cuda_runtime/lib` from where the link points. doctor's model of the
load must agree with the loader, and its diagnosis must name the layout, not a missing CUDA runtime.

A real venv with a pip-installed torch 2.7.1+cu128 package whose libc10_cuda.so (built here) needs
libcudart.so.12 through that RUNPATH (this machine's loader has only libcudart.so.12 on its own path),
and a flash_attn_2_cuda built here against both.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.abi.test_load_closure import place
from tests.doctor import envs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ builds the extensions and stand-in libraries"),
]

RUNPATH = "$ORIGIN/../../nvidia/cuda_runtime/lib"


@pytest.mark.parametrize("layout", ["file-links", "directory-link"])
def test_torch_lib_linked_from_a_store(run_doctor, builds, tmp_path, layout):
    base = envs.pyenv_python("3.11")
    if base is None:
        pytest.skip("pyenv has no Python 3.11 here")
    python = envs.venv(tmp_path / "venv", base)
    envs.pip_install(
        python, str(envs.wheel(tmp_path / "wheels", "torch", "2.7.1", envs.torch_modules("2.7.1", "12.8", 1)))
    )
    site = envs.site_packages(python)
    cudart = envs.standin_cudart(site / "nvidia" / "cuda_runtime" / "lib", 12)
    store = tmp_path / "store" / "0123-torch-2.7.1" / "lib"
    envs.standin_c10(store, cxx11_abi=1, set_device=None)
    decl = envs.SET_DEVICE["char"][0].replace(");", ") {}")
    envs.compile_shared(
        store / "libc10_cuda.so",
        envs.CUDART[0] + "\n" + decl + "\nint faforge_uses_cudart() { return cudaGetLastError(); }\n",
        soname="libc10_cuda.so",
        args=(
            f"-L{cudart.parent}",
            "-Wl,--no-as-needed",
            "-l:libcudart.so.12",
            f"-Wl,--enable-new-dtags,-rpath,{RUNPATH}",
        ),
    )
    torch_lib = site / "torch" / "lib"
    place(torch_lib, store, layout)
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}{envs.ext_suffix(python)}",
        python,
        [envs.SET_DEVICE["char"], envs.CUDART],
        (f"-L{store}", "-lc10_cuda", f"-L{cudart.parent}", "-l:libcudart.so.12"),
    )
    envs.install_flash_attn(python, ext, tmp_path)
    loaded = subprocess.run([python, "-c", "import torch, flash_attn_2_cuda"], capture_output=True, text=True)
    assert (loaded.returncode == 0) == (layout == "file-links"), loaded.stderr
    result = run_doctor("--python", python)
    gate = result.report["facts"]["abi_gate"]
    found = {lib["name"]: lib["path"] for module in gate["modules"] for lib in module["libraries"]}
    if layout == "file-links":
        assert result.code == 0 and result.kinds() == [], result.report["problems"]
        assert gate["ok"] is True and found["libcudart.so.12"] == str(cudart)
        return

    assert "libcudart.so.12: cannot open shared object file" in loaded.stderr
    assert result.code == 1
    # The model does not find what the loader does not: libcudart.so.12 is beside the link, not where `..` leads.
    assert "libcudart.so.12" not in found, found
    missing = [p for p in gate["problems"] if p["library"] == "libcudart.so.12"]
    assert missing and {p["kind"] for p in missing} == {"missing-library"}, gate["problems"]
    assert any(f"{torch_lib} is a symlink to a folder" in p["detail"] for p in missing), missing
    assert result.kinds() == ["torch-import-failed"], result.report["problems"]
    diagnosis = result.problem("torch-import-failed")
    words = " ".join([diagnosis["message"], *diagnosis["details"]])
    for said in (
        f"{torch_lib} is a symlink to a folder",
        "libcudart.so.12",
        str(cudart.parent),
        "link the files, not the directory",
    ):
        assert said in words, (said, diagnosis)
