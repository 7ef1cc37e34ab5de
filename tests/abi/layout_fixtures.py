"""Stand-ins for the torch::CppFunction layout break at torch 2.9 (faforge/abi/layout_breaks.json), compiled
with g++ in the test run: the shapes the real binaries have (tests/abi/test_layout_breaks.py measures those).

* torch "before" / "after": a libtorch_cpu.so exporting torch::Library::_impl(char const*, torch::CppFunction&&,
  torch::_RegisterOrVerify) &; the "after" one also exports c10::KernelFunction::~KernelFunction(), as torch 2.9's does.
* extensions calling _impl, as TORCH_LIBRARY_IMPL does: "old" exports torch code of its own (default
  visibility, like torchvision's and fbgemm-gpu's) and no ~KernelFunction (as aarch64 builds for torch 2.8
  do); "new" also imports c10::SymInt::maybe_as_int_slow_path() const, which variants/torch_symbols.yaml
  dates to torch 2.9 or later; "marked" carries the weak ~KernelFunction without a dated import (as x86_64
  torchvision 0.23.0, built for 2.8, does); "hidden" is built with -fvisibility=hidden, so nothing shows;
  "plain" registers no operator.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

TORCH_SOURCE = """
namespace torch {
struct CppFunction;
enum class _RegisterOrVerify { REGISTER, VERIFY };
struct Library { Library& _impl(const char*, CppFunction&&, _RegisterOrVerify) &; };
Library& Library::_impl(const char*, CppFunction&&, _RegisterOrVerify) & { return *this; }
}
#ifdef AFTER
namespace c10 { struct KernelFunction { ~KernelFunction(); }; KernelFunction::~KernelFunction() {} }
namespace c10 {
struct SymInt { long maybe_as_int_slow_path() const; }; long SymInt::maybe_as_int_slow_path() const { return 0; }
}
#endif
"""

EXTENSION_SOURCE = """
namespace torch {
struct CppFunction { int x; };
enum class _RegisterOrVerify { REGISTER, VERIFY };
struct Library { Library& _impl(const char*, CppFunction&&, _RegisterOrVerify) &; };
}
#if defined(NEW) || defined(MARKED)
namespace c10 { struct KernelFunction { ~KernelFunction(); }; inline KernelFunction::~KernelFunction() {} }
#endif
#ifdef NEW
namespace c10 { struct SymInt { long maybe_as_int_slow_path() const; }; }  // exported from torch 2.9 on
#endif
namespace at { int own_kernel(int x) { return x + 1; } }  // torch code the extension defines itself
extern "C" void* PyInit_layout_ext() { return nullptr; }
extern "C" int register_ops(torch::Library& lib) {
#if defined(NEW) || defined(MARKED)
  { c10::KernelFunction k; }
#endif
#ifdef NEW
  c10::SymInt{}.maybe_as_int_slow_path();
#endif
#ifndef PLAIN
  lib._impl("my_op", torch::CppFunction{1}, torch::_RegisterOrVerify::REGISTER);
#endif
  return at::own_kernel(0);
}
"""

EXTENSIONS = {
    "old": [],
    "new": ["-DNEW"],
    "marked": ["-DMARKED"],
    "hidden": ["-fvisibility=hidden"],
    "plain": ["-DPLAIN"],
}


def _compile(cxx: str, source: str, out: Path, flags: list[str], *links: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".cpp")
    src.write_text(source)
    subprocess.run(
        [cxx, "-shared", "-fPIC", "-O0", *flags, str(src), "-o", str(out), *links], check=True, capture_output=True
    )
    return out


def build(cxx: str, folder: Path) -> dict[str, Path]:
    """{'torch_before', 'torch_after': torch/lib folders; 'old', 'new', 'hidden', 'plain': extension .so files}."""
    found = {}
    for side, flags in (("before", []), ("after", ["-DAFTER"])):
        lib = folder / f"torch-{side}" / "torch" / "lib"
        _compile(cxx, TORCH_SOURCE, lib / "libtorch_cpu.so", flags)
        found[f"torch_{side}"] = lib
    for name, flags in EXTENSIONS.items():
        # Linked against the "before" torch by name only (DT_NEEDED libtorch_cpu.so), as against any torch.
        found[name] = _compile(
            cxx,
            EXTENSION_SOURCE,
            folder / "ext" / f"layout_{name}.so",
            flags,
            f"-L{found['torch_after']}",
            "-ltorch_cpu",
        )
    return found


def layout_places(tmp: Path) -> dict[str, str]:
    """The hostile harness's {layout_torch_before}, {layout_torch_after}, {layout_old}, ... (none without g++)."""
    cxx = shutil.which("g++")
    return {f"layout_{name}": str(path) for name, path in build(cxx, tmp / "layout").items()} if cxx else {}
