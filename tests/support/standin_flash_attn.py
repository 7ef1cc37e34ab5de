"""Stand-ins for compiled flash-attn packages: a rendered cell's real name, version, build string and
run requirements, holding a real tiny extension module compiled with g++ during the test.

The extension (flash_attn_2_cuda) imports like the real one: it needs `import torch` first and
resolves two real libc10 symbols, c10::cuda::SetDevice(signed char, bool) (torch >= 2.8) and
c10::detail::torchCheckFail(..., std::string const&), whose mangled name carries the C++ ABI.
Compiled with the wrong ABI it fails the ABI gate and the import, as a mislabelled build would.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from faforge.channel.local import PackageSpec, assemble

EXTENSION_SOURCE = r"""
#include <Python.h>
#include <string>
namespace c10 {
namespace cuda { void SetDevice(signed char, bool); }
namespace detail { [[noreturn]] void torchCheckFail(const char*, const char*, unsigned int, const std::string&); }
}
extern "C" void faforge_standin_touch(int n) {
  if (n == 12345) { c10::cuda::SetDevice(0, false); c10::detail::torchCheckFail("f", "file", 1, std::string("m")); }
}
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "flash_attn_2_cuda", "faforge test stand-in", -1, nullptr};
PyMODINIT_FUNC PyInit_flash_attn_2_cuda(void) { return PyModule_Create(&module); }
"""


class CannotCompile(Exception):
    """No g++ (or no Python headers) here; tests skip with this text."""


def python_include(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def compile_extension(work: Path, torch_lib: Path, python: Path, cxx11_abi: int) -> Path:
    """flash_attn_2_cuda.so linked against libc10/libc10_cuda in torch_lib, with the given C++ ABI."""
    gxx = shutil.which("g++")
    include = python_include(python)
    if not gxx or not (include / "Python.h").is_file():
        raise CannotCompile(f"need g++ and Python.h (g++: {gxx}, {include})")
    work.mkdir(parents=True, exist_ok=True)
    source = work / "standin.cpp"
    source.write_text(EXTENSION_SOURCE)
    out = work / f"flash_attn_2_cuda-abi{cxx11_abi}.so"
    subprocess.run([gxx, "-shared", "-fPIC", "-O1", f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}", f"-I{include}", str(source),
                    f"-L{torch_lib}", "-lc10", "-lc10_cuda", "-o", str(out)], check=True, capture_output=True)
    return out


def standin_package(channel_dir: Path, *, version: str, build: str, subdir: str, depends, python: str, extension: Path) -> Path:
    """Assemble flash-attn-<version>-<build>.conda holding flash_attn/ and the extension."""
    site = f"lib/python{python}/site-packages/"
    tag = "cpython-" + python.replace(".", "") + "-" + ("x86_64" if subdir == "linux-64" else "aarch64") + "-linux-gnu"
    files = {
        site + "flash_attn/__init__.py": f"import flash_attn_2_cuda  # noqa: F401\n__version__ = {version!r}\n",
        site + f"flash_attn_2_cuda.{tag}.so": extension.read_bytes(),
    }
    return assemble(PackageSpec(name="flash-attn", version=version, build=build, subdir=subdir, depends=tuple(depends), files=files), channel_dir)


