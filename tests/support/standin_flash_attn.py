"""Stand-ins for compiled flash-attn packages: a rendered cell's real name, version, build string and
run requirements, holding a real tiny extension module compiled with g++ during the test, and the
kernel package it pins, holding a real tiny libflash_attn_kernels.so compiled by nvcc for the cell's
arch list (one kernel, one exported launch), which the extension needs as the real glue does.

The extension (flash_attn_2_cuda) imports like the real one: it needs `import torch` first and
resolves two real libc10 symbols, c10::cuda::SetDevice(signed char, bool) (torch >= 2.8) and
c10::detail::torchCheckFail(..., std::string const&), whose mangled name carries the C++ ABI.
Compiled with the wrong ABI it fails the ABI gate and the import, as a mislabelled build would.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from faforge.backend import archs as build  # the recipe build's own arch parser and -gencode flags
from faforge.channel.local import PackageSpec, assemble
from faforge.matrix.kernels import KERNEL_PACKAGE, kernel_pin
from tests.support.tiers import slow_work

EXTENSION_SOURCE = r"""
#include <Python.h>
#include <string>
namespace c10 {
namespace cuda { void SetDevice(signed char, bool); }
namespace detail { [[noreturn]] void torchCheckFail(const char*, const char*, unsigned int, const std::string&); }
}
KERNEL_DECLARATION
extern "C" void faforge_standin_touch(int n) {
  if (n == 12345) {
    c10::cuda::SetDevice(0, false); c10::detail::torchCheckFail("f", "file", 1, std::string("m")); KERNEL_CALL
  }
}
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "flash_attn_2_cuda", "faforge test stand-in", -1, nullptr};
PyMODINIT_FUNC PyInit_flash_attn_2_cuda(void) { return PyModule_Create(&module); }
"""


# Like the real library: everything hidden but the launch and the C interface verify's import gate
# looks up (torch_shim/api/flash_attn_kernels_api.h).
KERNEL_LIBRARY_SOURCE = r"""
#define EXPORT extern "C" __attribute__((visibility("default")))
__global__ void faforge_standin_kernel(float* x) { x[threadIdx.x] *= 2.0f; }
EXPORT void flash_attn_kernels_standin_launch(float* x) { faforge_standin_kernel<<<1, 1>>>(x); }
EXPORT void flash_attn_kernels_set_cuda_error_handler(void (*)(int, const char*, const char*, int)) {}
"""


class CannotCompile(Exception):
    """No g++ (or no Python headers) here; tests skip with this text."""


def python_include(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def compile_kernel_library(work: Path, nvcc: Path, cuda_archs: str) -> Path:
    """libflash_attn_kernels.so with SASS for each SM of `cuda_archs` ('80;90;120+PTX') and PTX for the +PTX one,
    linked against the shared CUDA runtime as the real one is."""
    slow_work("an nvcc compile (tests/support/standin_flash_attn.py)")
    work.mkdir(parents=True, exist_ok=True)
    source = work / "kernels.cu"
    source.write_text(KERNEL_LIBRARY_SOURCE)
    gencode = build.gencode_flags(build.parse_arch_list(cuda_archs))
    out = work / "libflash_attn_kernels.so"
    result = subprocess.run(
        [
            str(nvcc),
            "-shared",
            "-Xcompiler",
            "-fPIC,-fvisibility=hidden",
            "-cudart",
            "shared",
            *gencode,
            str(source),
            "-o",
            str(out),
            "-Xlinker",
            "-soname=libflash_attn_kernels.so",
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise CannotCompile(
            f"nvcc could not build the stand-in kernel library for {cuda_archs}: {result.stderr[-500:]}"
        )
    return out


def compile_extension(
    work: Path, torch_lib: Path, python: Path, cxx11_abi: int, kernel_library: Path | None = None
) -> Path:
    """flash_attn_2_cuda.so linked against libc10/libc10_cuda in torch_lib, with the given C++ ABI; with
    `kernel_library`, also against it, with the RUNPATH rattler-build gives a module in site-packages."""
    slow_work("a g++ compile (tests/support/standin_flash_attn.py)")
    gxx = shutil.which("g++")
    include = python_include(python)
    if not gxx or not (include / "Python.h").is_file():
        raise CannotCompile(f"need g++ and Python.h (g++: {gxx}, {include})")
    work.mkdir(parents=True, exist_ok=True)
    source = work / "standin.cpp"
    declaration, call = (
        ('extern "C" void flash_attn_kernels_standin_launch(float*);', "flash_attn_kernels_standin_launch(nullptr);")
        if kernel_library
        else ("", "")
    )
    source.write_text(EXTENSION_SOURCE.replace("KERNEL_DECLARATION", declaration).replace("KERNEL_CALL", call))
    out = work / f"flash_attn_2_cuda-abi{cxx11_abi}.so"
    kernels = (
        [f"-L{kernel_library.parent}", "-lflash_attn_kernels", "-Wl,-rpath,$ORIGIN/../.."] if kernel_library else []
    )
    subprocess.run(
        [
            gxx,
            "-shared",
            "-fPIC",
            "-O1",
            f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}",
            f"-I{include}",
            str(source),
            f"-L{torch_lib}",
            "-lc10",
            "-lc10_cuda",
            *kernels,
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out


def standin_package(
    channel_dir: Path, *, version: str, build: str, subdir: str, depends, python: str, extension: Path
) -> Path:
    """Assemble flash-attn-<version>-<build>.conda holding flash_attn/ and the extension."""
    site = f"lib/python{python}/site-packages/"
    tag = "cpython-" + python.replace(".", "") + "-" + ("x86_64" if subdir == "linux-64" else "aarch64") + "-linux-gnu"
    files = {
        site + "flash_attn/__init__.py": f"import flash_attn_2_cuda  # noqa: F401\n__version__ = {version!r}\n",
        site + f"flash_attn_2_cuda.{tag}.so": extension.read_bytes(),
    }
    return assemble(
        PackageSpec(
            name="flash-attn", version=version, build=build, subdir=subdir, depends=tuple(depends), files=files
        ),
        channel_dir,
    )


def standin_kernel_package(channel_dir: Path, *, version: str, build: str, subdir: str, depends, library: Path) -> Path:
    """Assemble libflash-attn-kernels-<version>-<build>.conda holding lib/libflash_attn_kernels.so."""
    return assemble(
        PackageSpec(
            name=KERNEL_PACKAGE,
            version=version,
            build=build,
            subdir=subdir,
            depends=tuple(depends),
            files={"lib/libflash_attn_kernels.so": library.read_bytes()},
        ),
        channel_dir,
    )


def pinned_kernel_record(run_requirements, subdir: str, cuda: str | None = None, depends=()) -> PackageSpec:
    """Metadata of the kernel build a flash-attn's run requirements pin (no files: for solves and installs
    that load no kernel library), with the recipe's run requirement on cuda-version when `cuda` is given."""
    pin = kernel_pin(run_requirements)
    if pin is None:
        raise ValueError(f"no libflash-attn-kernels pin among {list(run_requirements)}")
    cuda_range = (f"cuda-version >={cuda},<{int(cuda.split('.')[0]) + 1}",) if cuda else ()
    return PackageSpec(KERNEL_PACKAGE, pin.version, pin.build, subdir, depends=(*cuda_range, *depends))
