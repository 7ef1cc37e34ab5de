"""The glue, flash_attn_2_cuda: flash_api.cpp against the running Python's torch, linked with
-Wl,--no-undefined against the kernel library, packed as a wheel.

A local build's wheel carries the library in flash_attn_2_cuda.libs/ (auditwheel's layout), found
through the module's RUNPATH; the recipe's glue links against the installed library instead, found
through the RUNPATH rattler-build and conda-build give every ELF file they package.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from faforge.backend.ccache import INCLUDE_VIEW_DIR, include_view, through_view, view_roots
from faforge.backend.errors import BuildError
from faforge.backend.layout import PHILOX_BITS_DEFINE
from faforge.backend.logger import log
from faforge.backend.ninja import KERNEL_SONAME
from faforge.backend.postlink import drop_libpython_needed, verify_abi
from faforge.backend.toolchain import cuda_triplet, nvcc_cuda_include_dirs, target_machine
from faforge.family import FLASH_ATTN, families

if TYPE_CHECKING:
    from setuptools import Extension

# Where a local build's wheel carries the kernel library, beside the module (auditwheel's layout).
WHEEL_LIBS_DIR = f"{FLASH_ATTN.extension}.libs"


def import_torch() -> tuple[ModuleType, ModuleType, str]:
    """This Python's torch, its cpp_extension and the CUDA home it found; the glue compiles against them."""
    try:
        import torch  # noqa: PLC0415  (the torch we build against)
        from torch.utils import cpp_extension  # noqa: PLC0415 (in the torch import's try)
    except ImportError as exc:
        raise BuildError(
            f"torch does not import in {sys.executable} ({exc}); the build compiles against this "
            "Python's torch, so install a CUDA build of torch here first (or run it with the python that has it)"
        ) from None

    if torch.version.cuda is None:
        raise BuildError(
            f"torch {torch.__version__} in {sys.prefix} is a CPU "
            f"build; {FLASH_ATTN.package} needs a CUDA build of torch"
        )
    if not cpp_extension.CUDA_HOME:
        raise BuildError("nvcc not found: set CUDA_HOME or put nvcc on PATH")
    return torch, cpp_extension, cpp_extension.CUDA_HOME


def torch_include_dir(torch: ModuleType) -> str:
    if torch.__file__ is None:
        raise BuildError(
            f"torch in {sys.prefix} has no __init__.py (a namespace package, not an installed torch); reinstall torch"
        )
    return os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "include")


def python_link_args() -> tuple[list[str], str | None]:
    """Link against libpython only so that --no-undefined can see Py* symbols.

    The DT_NEEDED entry is removed again after the link: an extension module
    must take the Python symbols from the interpreter that loads it.
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlibrary = sysconfig.get_config_var("LDLIBRARY") or ""
    match = re.fullmatch(r"lib(python[^/]*?)\.so(\..*)?", ldlibrary)
    if not (libdir and match and (Path(libdir) / ldlibrary).exists()):
        raise BuildError(
            f"no shared libpython next to {sys.executable} (LDLIBRARY={ldlibrary!r}); "
            "it is needed to link with --no-undefined. Use a Python built with --enable-shared "
            "(conda-forge, pyenv with PYTHON_CONFIGURE_OPTS=--enable-shared, Debian's python3-dev)"
        )
    return [f"-L{libdir}", f"-l{match.group(1)}"], ldlibrary


def glue_runpath(carry_library: bool) -> list[str]:
    """A carried kernel library is found beside the module; an installed one (conda's lib/) through the
    RUNPATH rattler-build and conda-build give every ELF file they package. torch's libraries through
    site-packages/torch/lib: the legacy pytorch channel keeps them there, not in lib/ (conda-forge's
    torch/lib links into lib/), so `import flash_attn_2_cuda` works before `import torch` in both."""
    return [*([f"-Wl,-rpath,$ORIGIN/{WHEEL_LIBS_DIR}"] if carry_library else []), "-Wl,-rpath,$ORIGIN/torch/lib"]


def glue_sources(shim: Path) -> list[str]:
    """The glue's TUs: upstream's flash_api.cpp (relative to the sdist) and the shim's torch_cuda_check.cpp."""
    return [FLASH_ATTN.host_source, str(shim / "torch_cuda_check.cpp")]


def glue_include_dirs(source_dir: Path, shim: Path) -> list[str]:
    """The sdist's include folders and the shim's api/ (the kernel library's declarations), before torch's."""
    return [*(str(source_dir / d) for d in FLASH_ATTN.include_dirs), str(shim / "api")]


def glue_compile_args(*, std: str, abi: int, philox_bits: int) -> list[str]:
    """Ours, after what torch's cpp_extension adds: the C++ standard
    this torch needs, the forced C++ ABI, the Philox layout."""
    return ["-O3", f"-std={std}", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", f"-D{PHILOX_BITS_DEFINE}={philox_bits}"]


def glue_link_args(*, library: Path, carry_library: bool, python_link: list[str]) -> list[str]:
    """The kernel library by path: DT_NEEDED is its SONAME. --strip-all: no static symbol table, as conda-forge's
    flash-attn feedstock links it; .dynsym (what the ABI checks read) stays. libpython only for --no-undefined
    (finish_extension drops it again)."""
    return [str(library), *glue_runpath(carry_library), "-Wl,--no-undefined", "-Wl,--strip-all", *python_link]


def finish_extension(path: Path, *, libpython: str | None, abi: int, library: Path, carry_library: bool) -> None:
    """After the link: libpython's DT_NEEDED dropped, the C++ ABI read back from the symbols, the library carried."""
    drop_libpython_needed(path, libpython)
    verify_abi(path, abi)
    if carry_library:
        (path.parent / WHEEL_LIBS_DIR).mkdir(exist_ok=True)
        shutil.copy2(library, path.parent / WHEEL_LIBS_DIR / KERNEL_SONAME)  # the name DT_NEEDED has


def nested_family_modules() -> list[str]:
    """Another family's package inside flash_attn (flash_attn.cute): upstream's sdist carries an old copy of it
    at that family's paths, which one environment's installer would let the two packages overwrite."""
    inside = [f.module for f in families() if f.module.startswith(FLASH_ATTN.module + ".")]
    return [pattern for module in inside for pattern in (module, f"{module}.*")]


def pack_wheel(
    *, source_dir: Path, build_dir: Path, wheel_dir: Path, version: str, extension: Extension, cmdclass: dict
) -> Path:
    """setuptools' wheel of the sdist's Python package and `extension`, built by cmdclass["build_ext"]."""
    from setuptools import find_packages, setup  # noqa: PLC0415 (setuptools: slow, wheel only)

    os.chdir(source_dir)
    started = time.monotonic()
    setup(
        name=FLASH_ATTN.module,
        version=version,
        packages=find_packages(include=[f"{FLASH_ATTN.module}*"], exclude=nested_family_modules()),
        python_requires=">=3.9",
        install_requires=["torch", "einops"],
        ext_modules=[extension],
        cmdclass=cmdclass,
        zip_safe=False,
        script_args=[
            "build",
            "--build-base",
            str(build_dir),
            "bdist_wheel",
            "--dist-dir",
            str(wheel_dir),
            "--bdist-dir",
            str(build_dir / "bdist"),
        ],
    )
    log(f"glue built in {time.monotonic() - started:.0f}s")
    wheels = sorted(wheel_dir.glob(f"{FLASH_ATTN.module}-{version}-*.whl"), key=os.path.getmtime)
    if not wheels:
        raise BuildError(f"setuptools finished but left no wheel in {wheel_dir}")
    return wheels[-1]


def build_wheel(
    *,
    torch: ModuleType,
    cpp_extension: ModuleType,
    cuda_home: str,
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
    python_link: tuple[list[str], str | None],
) -> Path:
    """Compiles and links the glue against `library` (carried
    in the wheel with `carry_library`), and packs the wheel."""
    py_link, libpython = python_link
    # torch <= 2.5 adds -D_GLIBCXX_USE_CXX11_ABI from this attribute; make it
    # agree with the forced value so the compiler never sees two definitions.
    if hasattr(torch._C, "_GLIBCXX_USE_CXX11_ABI"):
        torch._C._GLIBCXX_USE_CXX11_ABI = bool(abi)
    os.environ["MAX_JOBS"] = str(max_jobs)

    torch_include = torch_include_dir(torch)
    cuda_dirs = nvcc_cuda_include_dirs(
        cuda_home, dict(os.environ), cuda_triplet(target_machine(dict(os.environ), platform.machine()))
    )
    view = include_view(build_dir / INCLUDE_VIEW_DIR, view_roots(torch_include, cuda_home, cuda_dirs))

    built: list[bool] = []

    class CheckedBuildExtension(cpp_extension.BuildExtension):  # type: ignore[name-defined]  # a run-time base class
        def build_extensions(self):
            # bdist_wheel runs build_ext a second time. That run would append torch's -D flags to the
            # compile args again, relink the extension and verify it again; its output is already in build_lib.
            if built:
                return
            super().build_extensions()
            built.append(True)

        def build_extension(self, ext):
            super().build_extension(ext)
            finish_extension(
                Path(self.get_ext_fullpath(ext.name)),
                libpython=libpython,
                abi=abi,
                library=library,
                carry_library=carry_library,
            )

    extension = cpp_extension.CUDAExtension(
        name=FLASH_ATTN.extension,
        sources=glue_sources(shim),
        extra_compile_args={"cxx": glue_compile_args(std=std, abi=abi, philox_bits=philox_bits)},
        extra_link_args=glue_link_args(library=library, carry_library=carry_library, python_link=py_link),
        include_dirs=glue_include_dirs(source_dir, shim),
    )
    # Same dirs in the same order, spelled through the view; nvcc's own CUDA dirs follow torch's
    # so that the header nvcc would have picked is still the one found first.
    extension.include_dirs = through_view(extension.include_dirs + cuda_dirs, view)
    return pack_wheel(
        source_dir=source_dir,
        build_dir=build_dir,
        wheel_dir=wheel_dir,
        version=version,
        extension=extension,
        cmdclass={"build_ext": CheckedBuildExtension},
    )


def install_wheel(wheel: Path) -> int:
    """pip-installs the wheel into this Python, as the recipe's build does (no deps, no index)."""
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", str(wheel)]
    log("+ " + shlex.join(pip))
    return subprocess.run(pip).returncode
