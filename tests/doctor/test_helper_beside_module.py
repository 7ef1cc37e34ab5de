"""A package's own helper library: `faforge doctor` reads an installed binary with the ABI gate's own load model,
helpers included.

A flash-attn whose extension NEEDs a helper library that lies beside it with no RUNPATH to it (the shape
of torchaudio's `_torchaudio.so` + `libtorchaudio.so`) is checked as its package would load it: the helper
is taken from beside the module and its imports are judged; a helper found nowhere leaves the gate's
verdict untold ("cannot-tell"), never an OK. Real torch 2.14.1 venv (local disk), extensions built here.
"""

from __future__ import annotations

import shutil

import pytest

from tests.doctor import envs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ builds the test extensions"),
]

HELPER = "libfa_helper.so"


def flash_attn_with_a_helper(python, builds, tmp_path, *, beside: bool):
    """flash_attn_2_cuda NEEDing libfa_helper.so (no RUNPATH); the helper imports c10::cuda::SetDevice(int),
    which torch 2.14.1 does not export (it has SetDevice(signed char, bool))."""
    stub = envs.standin_c10(builds / "torch-2.2-libs", cxx11_abi=1, set_device="int")
    decl, call = envs.SET_DEVICE["int"]
    helper = envs.compile_shared(
        tmp_path / "helper" / HELPER,
        f'{decl}\nextern "C" void fa_helper() {{ {call} }}\n',
        args=(f"-L{stub}", "-Wl,--no-as-needed", "-lc10_cuda"),
        soname=HELPER,
    )
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}{envs.ext_suffix(python)}",
        python,
        [('extern "C" void fa_helper();', "fa_helper();")],
        (f"-L{helper.parent}", "-Wl,--no-as-needed", f"-l:{HELPER}"),
    )
    files = {"flash_attn/__init__.py": "__version__ = '2.8.3'\n", ext.name: ext.read_bytes()}
    if beside:
        files[HELPER] = helper.read_bytes()  # site-packages/libfa_helper.so, beside the module
    envs.pip_install(python, str(envs.wheel(tmp_path / "wheels", "flash_attn", "2.8.3", files)))


def test_a_helper_beside_the_module_is_judged_as_loaded_first(run_doctor, cuda_overlay, builds, tmp_path):
    flash_attn_with_a_helper(cuda_overlay, builds, tmp_path, beside=True)
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    gate = result.report["facts"]["abi_gate"]
    (taken,) = [lib for lib in gate["modules"][0]["libraries"] if lib["beside_module"]]
    assert taken["name"] == HELPER
    assert gate["verdict"] == "problems"
    assert [(p["demangled"], p["imported_by"]) for p in gate["problems"]] == [
        ("c10::cuda::SetDevice(int)", taken["path"])
    ]
    problem = result.problem("signature-drift")
    assert HELPER in problem["message"] and "c10::cuda::SetDevice(int)" in problem["message"]


def test_a_helper_found_nowhere_is_no_ok(run_doctor, cuda_overlay, builds, tmp_path):
    flash_attn_with_a_helper(cuda_overlay, builds, tmp_path, beside=False)
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    gate = result.report["facts"]["abi_gate"]
    assert (gate["ok"], gate["verdict"]) == (False, "cannot-tell")
    assert [u["name"] for u in gate["unverified_libraries"]] == [HELPER]
    assert f"{HELPER}: cannot open shared object file" in result.report["facts"]["import"]["error"]["message"]
    assert any(HELPER in p["message"] for p in result.report["problems"]), result.report["problems"]
