"""The loader model on g++-built stand-ins: no missing torch symbol hides behind an unfound library, the
extension is resolved as `import` loads it (after torch, in a pip layout with nvidia/*/lib), only
torch's own libraries are torch, torch's C++ ABI comes from its own API, and the text names what
it found. Each case is also loaded by the real dynamic linker, torch's libraries first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.abi import classify, resolve
from faforge.abi.check import check_path, torch_facts
from faforge.abi.elf import read_dynamic_symbols
from tests.abi import elf_fixtures as fx
from tests.abi.conftest import run_faforge, validate

# `import torch` then the extension, as torch.ops.load_library and Python's importer both do it:
# torch's libraries are loaded first (RTLD_LOCAL), then the extension with RTLD_NOW.
LOAD_AFTER_TORCH = """
import ctypes, os, sys
for lib in sys.argv[2:]:
    ctypes.CDLL(lib)
try:
    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)
except OSError as exc:
    print(exc)
    sys.exit(1)
"""

C10 = "namespace c10 { int present() { return 1; } }\n"
CUDART = 'extern "C" int cudaGetLastError() { return 0; }\n'
EXT_USES = """
namespace c10 { int present(); DECL }
extern "C" int cudaGetLastError();
extern "C" void* PyInit_ext() { return nullptr; }
extern "C" int use() { return c10::present() + cudaGetLastError() CALL; }
"""


def load_after_torch(ext: Path, torch_libs: list[Path]) -> tuple[bool, str]:
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AFTER_TORCH, str(ext), *map(str, torch_libs)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"},
    )
    return result.returncode == 0, result.stdout.strip()


def pip_layout(gxx, site: Path, *, with_cudart: bool = True) -> Path:
    """site/torch/lib/libc10.so + libc10_cuda.so (RUNPATH to nvidia/cuda_runtime/lib, as pip's torch has),
    site/nvidia/cuda_runtime/lib/libcudart.so.12."""
    torch_lib, cudart_lib = site / "torch" / "lib", site / "nvidia" / "cuda_runtime" / "lib"
    fx.compile_shared(gxx, CUDART, cudart_lib / "libcudart.so.12", defines={}, flags=["-Wl,-soname,libcudart.so.12"])
    fx.compile_shared(gxx, C10, torch_lib / "libc10.so", defines={}, flags=["-Wl,-soname,libc10.so"])
    fx.compile_shared(
        gxx,
        'extern "C" int cudaGetLastError(); namespace c10 { namespace cuda { int sync() { return '
        "cudaGetLastError(); } } }\n",
        torch_lib / "libc10_cuda.so",
        defines={},
        flags=[
            "-Wl,-soname,libc10_cuda.so",
            f"-L{cudart_lib}",
            "-l:libcudart.so.12",
            "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../../nvidia/cuda_runtime/lib",
        ],
    )
    if not with_cudart:
        (cudart_lib / "libcudart.so.12").unlink()
    return torch_lib


def extension(gxx, out: Path, torch_lib: Path, cudart_dir: Path, *, missing: bool) -> Path:
    """Needs libc10.so, libc10_cuda.so and libcudart.so.12 (no RUNPATH, like flash-attn's wheels);
    with `missing`, also c10::absent(), which the stand-in libc10.so lacks."""
    defines = {"DECL": "int absent();" if missing else "", "CALL": "+ c10::absent()" if missing else ""}
    return fx.compile_shared(
        gxx,
        EXT_USES,
        out,
        defines=defines,
        flags=[
            f"-L{torch_lib}",
            f"-L{cudart_dir}",
            "-Wl,--no-as-needed",
            "-lc10",
            "-lc10_cuda",
            "-l:libcudart.so.12",
            "-Wl,--allow-shlib-undefined",
        ],
    )


@pytest.fixture
def layout(gxx, tmp_path):
    site = tmp_path / "site-packages"
    torch_lib = pip_layout(gxx, site)
    return site, torch_lib, site / "nvidia" / "cuda_runtime" / "lib"


def test_cuda_runtime_found_in_pip_nvidia_folder(gxx, layout, tmp_path):
    """libcudart.so.12 lives in nvidia/cuda_runtime/lib: torch loaded it, so the extension loads."""
    site, torch_lib, cudart = layout
    ext = extension(gxx, tmp_path / "ext.so", torch_lib, cudart, missing=False)
    verdict = check_path(ext, [site])
    module = verdict.modules[0]
    assert verdict.ok and module.unverified_libraries == () and module.unresolved_unverified == 0
    assert str(cudart.resolve() / "libcudart.so.12") in {lib.path for lib in module.libraries}
    assert load_after_torch(ext, [torch_lib / "libc10.so", torch_lib / "libc10_cuda.so"])[0]


def test_missing_torch_symbol_is_not_hidden_by_an_unfound_library(gxx, layout, tmp_path):
    """c10::absent() is missing from the libc10.so that was found; an unfound libhelper.so must not
    turn that into 'unverified' (the false OK the loader model ended)."""
    site, torch_lib, cudart = layout
    fx.compile_shared(gxx, "int helper() { return 1; }\n", tmp_path / "elsewhere" / "libhelper.so", defines={})
    ext = fx.compile_shared(
        gxx,
        EXT_USES + "int helper(); int more() { return helper(); }\n",
        tmp_path / "ext.so",
        defines={"DECL": "int absent();", "CALL": "+ c10::absent()"},
        flags=[
            f"-L{torch_lib}",
            f"-L{cudart}",
            f"-L{tmp_path / 'elsewhere'}",
            "-Wl,--no-as-needed",
            "-lc10",
            "-lc10_cuda",
            "-l:libcudart.so.12",
            "-lhelper",
            "-Wl,--allow-shlib-undefined",
        ],
    )
    verdict = check_path(ext, [site])
    module = verdict.modules[0]
    assert not verdict.ok
    assert [(p.kind, p.demangled) for p in module.problems] == [(classify.MISSING_SYMBOL, "c10::absent()")]
    assert [u.name for u in module.unverified_libraries] == ["libhelper.so"]
    assert module.unresolved_unverified == 1  # helper(): it may come from libhelper.so
    result = run_faforge("check-abi", ext, "--against", site)
    assert result.returncode == 1 and "c10::absent()" in result.stdout, result.stdout + result.stderr
    loaded, error = load_after_torch(ext, [torch_lib / "libc10.so", torch_lib / "libc10_cuda.so"])
    assert not loaded and "libhelper.so" in error  # ld.so stops at the first problem it meets


def test_missing_cuda_runtime_is_a_finding_and_symbols_are_still_checked(gxx, tmp_path):
    site = tmp_path / "site-packages"
    built = pip_layout(gxx, tmp_path / "build-site")
    ext = extension(
        gxx, tmp_path / "ext.so", built, tmp_path / "build-site" / "nvidia" / "cuda_runtime" / "lib", missing=True
    )
    pip_layout(gxx, site, with_cudart=False)
    verdict = check_path(ext, [site])
    kinds = [
        (p.kind, p.library if p.kind == classify.MISSING_LIBRARY else p.demangled) for p in verdict.modules[0].problems
    ]
    assert kinds == [(classify.MISSING_LIBRARY, "libcudart.so.12"), (classify.MISSING_SYMBOL, "c10::absent()")]
    validate(verdict.to_json())


def test_torch_adjacent_libraries_are_not_torch(gxx, layout, tmp_path):
    """libtorchvision.so / libtorchaudio.so ship beside an extension; unfound, they are unverified, not a
    missing torch library, and the verdict cannot be told."""
    site, torch_lib, cudart = layout
    fx.compile_shared(gxx, "int tv() { return 1; }\n", tmp_path / "vision" / "libtorchvision.so", defines={})
    ext = fx.compile_shared(
        gxx,
        EXT_USES + "int tv(); int more() { return tv(); }\n",
        tmp_path / "ext.so",
        defines={"DECL": "", "CALL": ""},
        flags=[
            f"-L{torch_lib}",
            f"-L{cudart}",
            f"-L{tmp_path / 'vision'}",
            "-Wl,--no-as-needed",
            "-lc10",
            "-lc10_cuda",
            "-l:libcudart.so.12",
            "-ltorchvision",
        ],
    )
    verdict = check_path(ext, [site])
    assert (verdict.verdict, verdict.modules[0].problems) == ("cannot-tell", ())
    assert [u.name for u in verdict.modules[0].unverified_libraries] == ["libtorchvision.so"]
    assert not resolve.is_torch_library("libtorchaudio.so") and not resolve.is_torch_library("libtorchvision.so.1")
    assert all(
        resolve.is_torch_library(n)
        for n in (
            "libc10.so",
            "libc10_cuda.so",
            "libtorch.so",
            "libtorch_cpu.so",
            "libtorch_cuda_linalg.so",
            "libtorch_python.so",
            "libtorch_global_deps.so",
        )
    )


def test_environment_dirs_of_a_venv(gxx, tmp_path):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    torch_lib = pip_layout(gxx, site)
    dirs = resolve.environment_dirs(resolve.torch_lib_dirs(tmp_path / "venv"))
    assert dirs == (
        torch_lib.resolve(),
        (site / "nvidia" / "cuda_runtime" / "lib").resolve(),
        (tmp_path / "venv" / "lib").resolve(),
    )


def test_torch_abi_from_its_own_api_not_from_exported_std_names(gxx, tmp_path):
    """A pre-C++11 torch whose libc10.so also exports std::__cxx11::basic_string members (as PyPI's
    torch 2.1-2.6 do) is ABI 0: c10's own functions spell std::string `Ss`."""
    lib = tmp_path / "torch" / "lib"
    c10_old = fx.compile_shared(
        gxx,
        "#include <string>\nnamespace c10 { struct SourceLocation { const char* f; };\n"
        "struct Error { Error(SourceLocation, std::string); };\n"
        "Error::Error(SourceLocation, std::string) {} }\n",
        tmp_path / "obj" / "c10_old.o",
        defines={},
        flags=["-D_GLIBCXX_USE_CXX11_ABI=0", "-c"],
    )
    std_new = fx.compile_shared(
        gxx,
        "#include <string>\ntemplate class std::__cxx11::basic_string<char>;\n",
        tmp_path / "obj" / "std_new.o",
        defines={},
        flags=["-D_GLIBCXX_USE_CXX11_ABI=1", "-c"],
    )
    lib.mkdir(parents=True)
    subprocess.run(
        [gxx.cxx, "-shared", "-o", str(lib / "libc10.so"), str(c10_old), str(std_new)], check=True, capture_output=True
    )
    names = read_dynamic_symbols(lib / "libc10.so").exports()
    assert classify.cxx11_abi_of(names) == 1  # what the whole table says: the trap
    assert "_ZN3c105ErrorC2ENS_14SourceLocationESs" in names
    assert torch_facts([lib]).cxx11_abi == 0


def test_platform_mismatch_text_names_the_architectures(extensions, stand_ins):
    result = run_faforge(
        "check-abi",
        extensions[("int8_bool", 1)],
        "--against",
        stand_ins[("int8_bool", 1)],
        "--platform",
        "linux-aarch64",
    )
    assert result.returncode == 1
    assert "None" not in result.stdout
    assert "wrong-architecture: the binary is built for x86_64, but the target platform runs aarch64" in result.stdout
