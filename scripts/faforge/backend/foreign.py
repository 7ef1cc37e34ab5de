"""The glue for a torch this Python does not import: flash_api.cpp against a target's site-packages (--torch-site).

A linux-aarch64 pip cell is built on an x86_64 machine, whose Python cannot import PyPI's aarch64 torch, so torch's
cpp_extension cannot add its flags there (conda-forge's cross-python answers the same problem for conda's build
environments). What cpp_extension would have read is read from the files instead (faforge.backend.target_torch:
the version and CUDA from torch/version.py, the C++ ABI and machine from its libraries), and this module gives the
compiler what cpp_extension gives a CUDAExtension's C++ sources: the torch include folders,
the CUDA target's include folder, -DTORCH_API_INCLUDE_EXTENSION_H, -DTORCH_EXTENSION_NAME, -fPIC, and the libraries
CUDAExtension links (c10, torch, torch_cpu, torch_python, cudart, c10_cuda, torch_cuda), then the glue's own flags,
RUNPATH and post-link steps (faforge.backend.glue). The target's C++ compiler compiles and links it through ninja;
setuptools packs the same raw wheel as the native build (flash_attn/ and the extension), tagged for the target.

The target torch is read by faforge.backend.target_torch, which refuses one this way cannot build (pybind11 2.x).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from faforge.backend.errors import BuildError
from faforge.backend.glue import (
    finish_extension,
    glue_compile_args,
    glue_include_dirs,
    glue_link_args,
    glue_sources,
    pack_wheel,
)
from faforge.backend.logger import log
from faforge.backend.ninja import CXX_COMPILE_RULE, ninja_escape, object_name, run_ninja
from faforge.backend.target_torch import TargetTorch
from faforge.family import FLASH_ATTN

# torch.utils.cpp_extension.CUDAExtension's libraries, in its order.
CUDA_EXTENSION_LIBRARIES = ("c10", "torch", "torch_cpu", "torch_python", "cudart", "c10_cuda", "torch_cuda")
# What BuildExtension adds to every C++ source of an extension named FLASH_ATTN.extension.
TORCH_EXTENSION_DEFINES = ("-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={FLASH_ATTN.extension}")
# What CPython's sysconfig CFLAGS give every extension setuptools compiles (its warnings and -g left out), and
# cpp_extension's -fPIC.
PYTHON_CFLAGS = ("-DNDEBUG", "-fwrapv", "-fPIC")
_PY_VERSION = re.compile(r"^#\s*define\s+PY_(MAJOR|MINOR)_VERSION\s+(\d+)", re.MULTILINE)


# ------------------------------------------------------------------------------------------ the target Python


@dataclass(frozen=True)
class TargetPython:
    """The headers and shared libpython of the CPython the glue is for."""

    includes: tuple[str, ...]  # Python.h's folder first
    library: Path  # linked only so that --no-undefined sees the Py* symbols; its DT_NEEDED is dropped after the link
    version: str  # 3.11

    @property
    def tag(self) -> str:
        return "cp" + self.version.replace(".", "")

    def extension_suffix(self, machine: str) -> str:
        """CPython's EXT_SUFFIX on Linux: .cpython-311-aarch64-linux-gnu.so."""
        return f".cpython-{self.version.replace('.', '')}-{machine}-linux-gnu.so"


def python_includes(explicit: list[str] | None) -> list[str]:
    """Python.h's folder and any more the target's headers need: `explicit` (--python-include), else this
    Python's (conda's cross-python answers with the target's)."""
    found = [Path(p) for p in explicit] if explicit else [Path(sysconfig.get_paths()["include"])]
    if not (found[0] / "Python.h").is_file():
        raise BuildError(
            f"--python-include {found[0]}: no Python.h there; install "
            "the Python headers (python3-dev) or name their folder"
        )
    return [str(p) for p in found]


def header_python_version(include: Path) -> str:
    """X.Y of the Python whose headers are in `include` (patchlevel.h)."""
    try:
        found = dict(_PY_VERSION.findall((include / "patchlevel.h").read_text(errors="replace")))
    except OSError:
        found = {}
    if set(found) != {"MAJOR", "MINOR"}:
        raise BuildError(
            f"--python-include {include}: no patchlevel.h naming "
            "PY_MAJOR_VERSION and PY_MINOR_VERSION; is it CPython's?"
        )
    return f"{found['MAJOR']}.{found['MINOR']}"


def prefix_python_includes(prefix: Path, version: str) -> list[str]:
    """The header folders of the CPython `version` installed in `prefix` (its bin/python's parent's parent):
    include/pythonX.Y, and include/ too where a Debian multiarch pyconfig.h there includes
    <aarch64-linux-gnu/pythonX.Y/pyconfig.h>."""
    include = prefix / "include"
    return [
        str(include / f"python{version}"),
        *([str(include)] if list(include.glob(f"*-linux-gnu/python{version}/pyconfig.h")) else []),
    ]


def find_libpython(include: Path, version: str) -> Path | None:
    """The shared libpython beside the headers' prefix: lib/ (conda,
    python-build-standalone) or lib/<multiarch>/ (Debian)."""
    prefix = include.parents[1] if include.name.startswith("python") else include.parent
    for name in (f"libpython{version}.so", f"libpython{version}.so.1.0"):
        for found in (prefix / "lib" / name, *sorted((prefix / "lib").glob(f"*-linux-gnu/{name}"))):
            if found.is_file():
                return found
    return None


def target_python(includes: list[str] | None, library: str | None) -> TargetPython:
    """--python-include and --python-library read: the version from
    the headers, the library found beside them when not named."""
    dirs = python_includes(includes)
    version = header_python_version(Path(dirs[0]))
    found = Path(library) if library else find_libpython(Path(dirs[0]), version)
    if found is None or not found.is_file():
        where = library or f"{Path(dirs[0]).parents[1]}/lib"
        raise BuildError(
            f"no shared libpython{version} at {where}; it is needed to link with --no-undefined: pass --python-library "
            "(the target Python's libpythonX.Y.so; a Python built with --enable-shared)"
        )
    return TargetPython(includes=tuple(dirs), library=found, version=version)


# ------------------------------------------------------------------------------------------ compile, link, pack


def compile_flags(
    *,
    source_dir: Path,
    shim: Path,
    torch: TargetTorch,
    python: TargetPython,
    cuda_includes: list[str],
    std: str,
    abi: int,
    philox_bits: int,
) -> list[str]:
    """The native build's include order (the sdist's and the shim's,
    torch's, the CUDA target's, Python's), then its flags."""
    dirs = [*glue_include_dirs(source_dir, shim), *torch.include_dirs, *cuda_includes, *python.includes]
    return [
        *PYTHON_CFLAGS,
        *(f"-I{d}" for d in dirs),
        *glue_compile_args(std=std, abi=abi, philox_bits=philox_bits),
        *TORCH_EXTENSION_DEFINES,
    ]


def link_flags(
    *, torch: TargetTorch, cudart_dirs: list[str], library: Path, carry_library: bool, python: TargetPython
) -> list[str]:
    return [
        "-shared",
        f"-L{torch.lib_dir}",
        *(f"-L{d}" for d in cudart_dirs),
        *(f"-l{name}" for name in CUDA_EXTENSION_LIBRARIES),
        *glue_link_args(library=library, carry_library=carry_library, python_link=[str(python.library)]),
    ]


def glue_ninja(*, cxx: str, sources: list[str], cflags: list[str], ldflags: list[str], output: str) -> str:
    """One compile per TU and the link, with the target's compiler."""
    lines = [
        f"# Generated by {FLASH_ATTN.build_script} (the glue for --torch-site); rerun the script rather than edit.",
        "ninja_required_version = 1.3",
        f"cxx = {shlex.quote(cxx)}",
        f"cflags = {shlex.join(cflags)}",
        f"ldflags = {shlex.join(ldflags)}",
        *CXX_COMPILE_RULE,
        "rule link",
        "  command = $cxx $in -o $out $ldflags",
        "  description = link $out",
    ]
    lines += [f"build {object_name(src)}: compile {ninja_escape(src)}" for src in sources]
    lines += [f"build {output}: link " + " ".join(object_name(src) for src in sources), f"default {output}", ""]
    return "\n".join(lines)


def build_wheel(
    *,
    torch: TargetTorch,
    python: TargetPython,
    machine: str,
    cxx: str,
    cuda_includes: list[str],
    cudart_dirs: list[str],
    source_dir: Path,
    build_dir: Path,
    wheel_dir: Path,
    version: str,
    library: Path,
    carry_library: bool,
    abi: int,
    std: str,
    philox_bits: int,
    max_jobs: int,
    shim: Path,
) -> Path:
    """Compiles and links the glue for `machine` with `cxx`, finishes it as the
    native build does, and packs the raw wheel (cpXY-cpXY-linux_<machine>)."""
    from setuptools import Extension  # noqa: PLC0415 (setuptools: slow, wheel only)
    from setuptools.command.build_ext import build_ext  # noqa: PLC0415 (setuptools: slow, wheel only)
    from setuptools.dist import Distribution  # noqa: PLC0415 (setuptools: slow, wheel only)

    out_dir = build_dir / "glue"
    out_dir.mkdir(parents=True, exist_ok=True)
    name = FLASH_ATTN.extension + python.extension_suffix(machine)
    sources = [str(source_dir / s) for s in glue_sources(shim)]
    cflags = compile_flags(
        source_dir=source_dir,
        shim=shim,
        torch=torch,
        python=python,
        cuda_includes=cuda_includes,
        std=std,
        abi=abi,
        philox_bits=philox_bits,
    )
    ldflags = link_flags(
        torch=torch, cudart_dirs=cudart_dirs, library=library, carry_library=carry_library, python=python
    )
    log(f"compile: {shlex.join([cxx, *cflags])}")
    log(f"link: {shlex.join([cxx, '-o', name, *ldflags])}")
    seconds = run_ninja(
        out_dir,
        glue_ninja(cxx=cxx, sources=sources, cflags=cflags, ldflags=ldflags, output=name),
        max_jobs,
        what=f"the glue for {machine}",
    )
    log(f"glue compiled and linked in {seconds:.0f}s")
    linked = out_dir / name
    tag = (python.tag, python.tag, f"linux_{machine}")
    finished: list[Path] = []

    class PrebuiltExtension(build_ext):
        """Puts the glue linked above where build_ext would have built it, under the target's file name."""

        def get_ext_filename(self, fullname):
            return fullname.replace(".", os.sep) + python.extension_suffix(machine)

        def build_extension(self, ext):
            path = Path(self.get_ext_fullpath(ext.name))
            if finished and path.is_file():
                return  # bdist_wheel runs build_ext a second time; the first run's output is in build_lib
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(linked, path)
            finish_extension(path, libpython=python.library.name, abi=abi, library=library, carry_library=carry_library)
            finished.append(path)

    class TargetWheel(Distribution().get_command_class("bdist_wheel")):  # type: ignore[misc]  # a run-time base class
        """The target's tags, not this Python's."""

        def get_tag(self):
            return tag

    return pack_wheel(
        source_dir=source_dir,
        build_dir=build_dir,
        wheel_dir=wheel_dir,
        version=version,
        extension=Extension(FLASH_ATTN.extension, sources=[]),
        cmdclass={"build_ext": PrebuiltExtension, "bdist_wheel": TargetWheel},
    )
