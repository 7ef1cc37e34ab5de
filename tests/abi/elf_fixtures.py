"""Real ELF fixtures for the ABI gate, compiled with g++ during the test run.

Stand-ins for torch's libc10_cuda.so export `c10::cuda::SetDevice` with the
three signatures torch has shipped (CONTEXT.md §1) plus a function taking and
returning std::string, so the C++11 ABI shows in the mangled names. Extensions
call both, like flash-attn does.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support.tiers import slow_work

# name -> (parameter list, call arguments, mangled SetDevice as torch exported it)
SIGNATURES = {
    "int": ("int", "0", "_ZN3c104cuda9SetDeviceEi"),  # torch ~2.1-2.2
    "int8": ("signed char", "0", "_ZN3c104cuda9SetDeviceEa"),  # torch 2.3-2.7
    "int8_bool": ("signed char, bool", "0, false", "_ZN3c104cuda9SetDeviceEab"),  # torch 2.8+
}
ABIS = (0, 1)

LIBRARY_SOURCE = """
#include <string>
namespace c10 {
namespace cuda { void SetDevice(PARAMS) {} }
std::string device_name(const std::string& s) { return s + ":0"; }
}
"""

# getenv (GLIBC_2.2.5) and arc4random (GLIBC_2.36) give the extension versioned libc requirements.
EXTENSION_SOURCE = """
#include <stdlib.h>
#include <string>
namespace c10 {
namespace cuda { void SetDevice(PARAMS); EXTRA_DECL }
std::string device_name(const std::string&);
}
extern "C" void* PyInit_fixture_ext() { return nullptr; }  // what makes a .so an extension module
extern "C" int use() {
  c10::cuda::SetDevice(ARGS); EXTRA_CALL
  return (int)c10::device_name(getenv("CUDA_DEVICE") ? "cuda" : "cpu").size() + (int)(arc4random() & 1);
}
"""

C10_SOURCE = "namespace c10 { int version() { return 1; } }\n"


@dataclass(frozen=True)
class Toolchain:
    cxx: str
    machine: str


def host_gxx() -> Toolchain | None:
    found = shutil.which("g++")
    return Toolchain(found, "x86_64") if found else None


# Where Debian's g++-aarch64-linux-gnu keeps the target's libc and libstdc++: the sysroot a check of an
# aarch64 binary names with --library-dir (this machine's own are x86_64).
AARCH64_SYSROOT_LIB = Path("/usr/aarch64-linux-gnu/lib")


def aarch64_gxx() -> Toolchain | None:
    found = shutil.which("aarch64-linux-gnu-g++")
    return Toolchain(found, "aarch64") if found else None


def compile_shared(tool: Toolchain, source: str, out: Path, *, defines: dict[str, str], flags: list[str] = ()) -> Path:
    """One g++ -shared call; the source text is written beside the output."""
    slow_work("a g++ compile (tests/abi/elf_fixtures.py)")
    out.parent.mkdir(parents=True, exist_ok=True)
    text = source
    for key, value in defines.items():
        text = text.replace(key, value)
    src = out.with_suffix(".cpp")
    src.write_text(text)
    subprocess.run(
        [tool.cxx, "-shared", "-fPIC", "-O1", "-o", str(out), str(src), *flags],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


def build_library(tool: Toolchain, folder: Path, signature: str, abi: int) -> Path:
    """A torch/lib stand-in: libc10.so and libc10_cuda.so for one SetDevice signature and ABI."""
    params, _, _ = SIGNATURES[signature]
    compile_shared(tool, C10_SOURCE, folder / "libc10.so", defines={}, flags=["-Wl,-soname,libc10.so"])
    return compile_shared(
        tool,
        LIBRARY_SOURCE,
        folder / "libc10_cuda.so",
        defines={"PARAMS": params},
        flags=[f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-Wl,-soname,libc10_cuda.so"],
    )


def build_extension(
    tool: Toolchain,
    out: Path,
    signature: str,
    abi: int,
    library_dir: Path,
    *,
    extra_decl: str = "",
    extra_call: str = "",
    extra_libs: list[str] = (),
) -> Path:
    """An extension calling SetDevice(signature) and device_name(std::string), linked like flash-attn."""
    params, args, _ = SIGNATURES[signature]
    return compile_shared(
        tool,
        EXTENSION_SOURCE,
        out,
        defines={"PARAMS": params, "ARGS": args, "EXTRA_DECL": extra_decl, "EXTRA_CALL": extra_call},
        flags=[f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-L{library_dir}", "-lc10_cuda", *extra_libs],
    )
