"""doctor's diagnoses stay consistent (the loader model): no C++ ABI mismatch inferred from a torch that does
not import, and a binary built for a newer torch is called that, with a range that excludes the user's
torch and the symbol the import failed on leading.

Real venvs: one whose pip-installed torch package fails to import (a small torch that loads its own
libc10.so, built like PyPI's pre-C++11 torch 2.1-2.6: c10's API spelled `Ss`, std::__cxx11 names
exported too), and an overlay of the cached real torch 2.14.1.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from faforge.abi.demangle import demangle
from faforge.doctor.torch_symbols_file import default_table
from tests.doctor import envs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="g++ builds the extensions and stand-in libraries"),
]

# In libc10.so of PyPI torch 2.15.0, not of 2.14.1 (variants/torch_symbols.yaml, exports section).
GAINED_IN_2_15 = (
    "namespace c10 { struct ThreadPool { void main_loop(); }; }",
    "static_cast<c10::ThreadPool*>(nullptr)->main_loop();",
)


def broken_pre_cxx11_torch(lib_dir):
    """libc10.so as PyPI's torch 2.1-2.6 ship it, in miniature: c10::Error's constructor in the
    pre-C++11 ABI, plus std::__cxx11::basic_string members (which outnumber the `Ss` names)."""
    lib_dir.mkdir(parents=True, exist_ok=True)
    objects = []
    for name, source, abi in (
        (
            "c10",
            envs.C10_DECLARATIONS + "c10::Error::Error(SourceLocation, std::string) {}\nc10::Error::~Error() {}\n",
            0,
        ),
        ("std", "#include <string>\ntemplate class std::__cxx11::basic_string<char>;\n", 1),
    ):
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
    modules["torch/__init__.py"] = (
        "raise ImportError('libcudnn.so.9: cannot open shared object file: No such file or directory')\n"
    )
    files = {**modules, "torch/lib/libc10.so": (lib / "libc10.so").read_bytes()}
    envs.pip_install(python, str(envs.wheel(tmp_path / "wheels", "torch", "2.6.0", files)))
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}{envs.ext_suffix(python)}",
        python,
        [envs.C10_ERROR],
        ("-D_GLIBCXX_USE_CXX11_ABI=0", f"-L{lib}", "-lc10"),
    )
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
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}{envs.ext_suffix(cuda_overlay)}",
        cuda_overlay,
        [envs.SET_DEVICE["char_bool"], GAINED_IN_2_15],
        (f"-L{torch_cuda.torch_lib}", "-lc10", "-lc10_cuda"),
    )
    envs.install_flash_attn(cuda_overlay, ext, tmp_path, "2.8.3")
    loaded = subprocess.run([cuda_overlay, "-c", "import torch, flash_attn_2_cuda"], capture_output=True, text=True)
    assert "undefined symbol: _ZN3c1010ThreadPool9main_loopEv" in loaded.stderr
    result = run_doctor("--python", cuda_overlay)
    assert result.code == 1
    assert result.kinds()[0] == "signature-drift", result.report["problems"]
    problem = result.problem("signature-drift")
    assert problem["message"] == (
        "this flash-attn was built for torch 2.15 or newer (checked through "
        f"{default_table().newest_checked}) (it imports c10::ThreadPool::main_loop()); "
        "your torch 2.14.1+cu130 does not export it"
    )
    assert problem["evidence"]["built_for"] == {"first": "2.15.0", "last": None}
    assert problem["details"][0] == "undefined symbol: _ZN3c1010ThreadPool9main_loopEv"
    assert "SetDevice" not in problem["message"]
    fix = result.fix("pip-install")  # a pip venv: the wheel of its torch's pip cell, which was built against it
    assert fix["cell"] == "pypi/linux-64/py311/torch2.14/cu130/abi1" and fix["resolves"] == ["signature-drift"]
    assert fix["commands"][-1].endswith(" torch==2.14.1 flash-attn==2.8.3.post2+torch2.14.cu130.abi1")


# libc10_cuda.so of PyPI torch 2.1-2.2 only (variants/torch_symbols.yaml): SetDevice(int) and its
# `int` siblings, which 2.3 respelled with `signed char` (DeviceIndex); return types are not mangled.
OLD_DEVICE_API = (
    "namespace c10 { namespace cuda { void SetDevice(int); void ExchangeDevice(int); void MaybeSetDevice(int);\n"
    "  void MaybeExchangeDevice(int); void GetDevice(int*); } }",
    "c10::cuda::SetDevice(0); c10::cuda::ExchangeDevice(0); c10::cuda::MaybeSetDevice(0);\n"
    "  c10::cuda::MaybeExchangeDevice(0); int d; c10::cuda::GetDevice(&d);",
)
# c10 functions no torch exports and the dating table does not know: only the gate names them.
UNDATED = (
    "namespace c10 { void faforge_gone_a(); void faforge_gone_b(); void faforge_gone_c(); }",
    "c10::faforge_gone_a(); c10::faforge_gone_b(); c10::faforge_gone_c();",
)


def _nm(path, *flags) -> set[str]:
    out = envs.run(["nm", "-D", *flags, "--format=posix", path]).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_drift_message_counts_every_symbol_the_torch_lacks(run_doctor, builds, tmp_path):
    """An extension built for torch 2.1-2.2 that also imports c10 functions the dating table does not
    know, beside a 2.14-style torch: the message's count, its evidence and its details name the same
    symbols, and those are exactly the c10 symbols nm finds undefined in the extension and not
    defined by the torch's libraries."""
    base = envs.pyenv_python("3.11")
    if base is None:
        pytest.skip("pyenv has no Python 3.11 here")
    python = envs.venv(tmp_path / "venv", base)
    lib = envs.standin_c10(builds / "c10-abi1-char_bool", cxx11_abi=1, set_device="char_bool")
    files = {
        **envs.torch_modules("2.14.1", "13.0", 1),
        **{f"torch/lib/{p.name}": p.read_bytes() for p in lib.glob("*.so")},
    }
    envs.pip_install(python, str(envs.wheel(tmp_path / "wheels", "torch", "2.14.1", files)))
    old = builds / "c10-2.2-and-undated"
    envs.compile_shared(old / "libc10_cuda.so", OLD_DEVICE_API[0].replace(");", ") {}"), soname="libc10_cuda.so")
    envs.compile_shared(old / "libc10.so", UNDATED[0].replace(");", ") {}"), soname="libc10.so")
    ext = envs.extension(
        tmp_path / "ext" / f"{envs.EXTENSION}{envs.ext_suffix(python)}",
        python,
        [OLD_DEVICE_API, UNDATED],
        (f"-L{old}", "-lc10", "-lc10_cuda"),
    )
    envs.install_flash_attn(python, ext, tmp_path, "2.5.0")
    torch_lib = envs.site_packages(python) / "torch" / "lib"
    lacking = {s for s in _nm(ext, "--undefined-only") if s.startswith("_ZN3c10")} - set().union(
        *(_nm(p, "--defined-only") for p in torch_lib.glob("*.so"))
    )
    loaded = subprocess.run([python, "-c", "import torch, flash_attn_2_cuda"], capture_output=True, text=True)
    failed_on = loaded.stderr.rsplit("undefined symbol: ", 1)[-1].strip()
    assert failed_on in lacking and len(lacking) == 8, (loaded.stderr, lacking)

    result = run_doctor("--python", python)
    assert result.code == 1
    problem = result.problem("signature-drift")
    symbols = problem["evidence"]["symbols"]
    assert len(symbols) == len(set(symbols)) and set(symbols) == lacking, (symbols, lacking)
    assert f"and {len(symbols) - 1} more symbols your torch lacks" in problem["message"], problem["message"]
    assert problem["message"].startswith("this flash-attn was built for torch 2.1-2.2 (it imports c10::cuda::")
    assert demangle(symbols[0]) in problem["message"]
    listed = [
        d.split(": ", 1)[1].split(" = ")[0]
        for d in problem["details"]
        if d.split(": ", 1)[0] in ("signature-drift", "missing-symbol")
    ]
    assert listed == symbols[: len(listed)]
    rest = len(symbols) - len(listed)
    assert rest == 0 or problem["details"][-1].startswith(f"and {rest} more"), problem["details"]
    assert problem["details"][0] == f"undefined symbol: {failed_on}"
    for fix in result.report["fixes"]:
        assert not re.search(r"\d+ (more )?symbols?", " ".join([fix["title"], *fix["notes"]])), fix
