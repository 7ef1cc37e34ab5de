"""doctor's diagnoses stay consistent (issue 12): no C++ ABI mismatch inferred from a torch that does
not import, and a binary built for a newer torch is called that, with a range that excludes the user's
torch and the symbol the import failed on leading.

Real venvs: one whose pip-installed torch package fails to import (a small torch that loads its own
libc10.so, built like PyPI's pre-C++11 torch 2.1-2.6: c10's API spelled `Ss`, std::__cxx11 names
exported too), and an overlay of the cached real torch 2.14.1.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from faforge.doctor.torch_symbols import default_table
from tests.doctor import envs

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None, reason="g++ builds the extensions and stand-in libraries")]

# In libc10.so of PyPI torch 2.15.0, not of 2.14.1 (variants/torch_symbols.yaml, exports section).
GAINED_IN_2_15 = ("namespace c10 { struct ThreadPool { void main_loop(); }; }",
                  "static_cast<c10::ThreadPool*>(nullptr)->main_loop();")


def broken_pre_cxx11_torch(lib_dir):
    """libc10.so as PyPI's torch 2.1-2.6 ship it, in miniature: c10::Error's constructor in the
    pre-C++11 ABI, plus std::__cxx11::basic_string members (which outnumber the `Ss` names)."""
    lib_dir.mkdir(parents=True, exist_ok=True)
    objects = []
    for name, source, abi in (("c10", envs.C10_DECLARATIONS + "c10::Error::Error(SourceLocation, std::string) {}\n"
                                      "c10::Error::~Error() {}\n", 0),
                              ("std", "#include <string>\ntemplate class std::__cxx11::basic_string<char>;\n", 1)):
        src, obj = lib_dir / f"{name}.cpp", lib_dir / f"{name}.o"
        src.write_text(source)
        envs.run(["g++", "-std=c++20", "-fPIC", "-c", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", src, "-o", obj])
        objects.append(obj)
    envs.run(["g++", "-shared", "-Wl,-soname,libc10.so", *objects, "-o", lib_dir / "libc10.so"])
    return lib_dir


def test_torch_that_fails_to_import_is_the_only_cause(run_doctor, builds, tmp_path):
    base = envs.pyenv_python("3.11")
    if base is None:
        pytest.skip("pyenv has no Python 3.11 here")
    python = envs.venv(tmp_path / "venv", base)
    lib = broken_pre_cxx11_torch(builds / "torch-2.6-abi0-lib")
    modules = envs.torch_modules("2.6.0", "12.4", 0)
    modules["torch/__init__.py"] = "raise ImportError('libcudnn.so.9: cannot open shared object file: No such file or directory')\n"
    files = {**modules, "torch/lib/libc10.so": (lib / "libc10.so").read_bytes()}
    envs.pip_install(python, str(envs.wheel(tmp_path / "wheels", "torch", "2.6.0", files)))
    ext = envs.extension(tmp_path / "ext" / f"{envs.EXTENSION}{envs.ext_suffix(python)}", python, [envs.C10_ERROR],
                         ("-D_GLIBCXX_USE_CXX11_ABI=0", f"-L{lib}", "-lc10"))
    envs.install_flash_attn(python, ext, tmp_path, "2.8.3+cu12torch2.6cxx11abiFALSE")
    result = run_doctor("--python", python)
    assert result.code == 1
    facts = result.report["facts"]
    assert facts["torch"]["imported"] is False and facts["flash_attn"]["binary"]["cxx11_abi"] == 0
    assert facts["torch"]["cxx11_abi"] == 0  # read from c10's own names, not the std::__cxx11 ones
    assert "cxx11-abi-mismatch" not in result.kinds()
    assert result.kinds()[0] == "torch-import-failed"


def test_binary_built_for_a_newer_torch(run_doctor, cuda_overlay, torch_cuda, tmp_path):
    """SetDevice(signed char, bool) is in both 2.14 and 2.15; c10::ThreadPool::main_loop() only in 2.15."""
    ext = envs.extension(tmp_path / "ext" / f"{envs.EXTENSION}{envs.ext_suffix(cuda_overlay)}", cuda_overlay,
                         [envs.SET_DEVICE["char_bool"], GAINED_IN_2_15], (f"-L{torch_cuda.torch_lib}", "-lc10", "-lc10_cuda"))
    envs.install_flash_attn(cuda_overlay, ext, tmp_path, "2.8.3")
    loaded = subprocess.run([cuda_overlay, "-c", "import torch, flash_attn_2_cuda"], capture_output=True, text=True)
    assert "undefined symbol: _ZN3c1010ThreadPool9main_loopEv" in loaded.stderr
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert result.kinds()[0] == "signature-drift", result.report["problems"]
    problem = result.problem("signature-drift")
    assert problem["message"] == ("this flash-attn was built for torch 2.15 or newer (checked through "
                                  f"{default_table().newest_checked}) (it imports c10::ThreadPool::main_loop()); "
                                  "your torch 2.14.1+cu130 does not export it")
    assert problem["evidence"]["built_for"] == {"first": "2.15.0", "last": None}
    assert problem["details"][0] == "undefined symbol: _ZN3c1010ThreadPool9main_loopEv"
    assert "SetDevice" not in problem["message"]
    build = result.fix("local-build")
    assert "against this torch 2.14.1+cu130" in build["title"] and build["resolves"] == ["signature-drift"]
