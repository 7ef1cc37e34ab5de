"""The kernel wheel: the conda kernel package's library, byte for byte but for its RUNPATH, as a wheel.

One per kernel key (platform, CUDA, arch list, Philox layout), shared by every glue wheel of that key, as
the conda package is shared by every cell: the kernel TUs are compiled once, for conda, and never for pip.
  libflash_attn_kernels-<version>+<label>-<build number>-py3-none-<manylinux tag>.whl
    libflash_attn_kernels/__init__.py                 (empty: the folder is a package, so pip owns it)
    libflash_attn_kernels/libflash_attn_kernels.so.1  (lib/libflash_attn_kernels.so.1 of the conda package,
                                                       RUNPATH $ORIGIN/../nvidia/cu13/lib)
The label is the conda build string without its build number (cu130_sm80_90_100_120ptx_philox64_ha5d2e90_0
-> cu130.sm80.90.100.120ptx.philox64.ha5d2e90), which goes into the build tag. Requires-Dist: PyPI's
libcudart distribution of the kernel's CUDA major, from its CUDA minor up to the next major
(nvidia-cuda-runtime>=13.0,<14; nvidia-cuda-runtime-cu12>=12.8,<13), which the one torch brings is taken:
torch 2.11's cuda-toolkit[cudart]==13.0.2 requires nvidia-cuda-runtime==13.0.96.*. It follows the CUDA alone,
so a kernel wheel's bytes never depend on the torch it was packed beside. Requires-Python: >=3, what its
py3-none tag says (the library holds no Python code; the index gives every link a Requires-Python).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from faforge import paths, wheelnames
from faforge.abi.platforms import PLATFORM_MACHINE as SUBDIR_MACHINE
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN
from faforge.pipwheel import layout
from faforge.pipwheel.built import BuiltWheel
from faforge.pipwheel.facts import read_wheel
from faforge.pipwheel.manylinux import platform_tag
from faforge.pipwheel.patch import set_runpath
from faforge.pipwheel.writer import WheelSpec, write_wheel

# The distribution that holds libcudart, in a torch wheel's Requires-Dist: NVIDIA's runtime wheel itself
# (nvidia-cuda-runtime-cu12==12.8.90 for torch 2.7-2.10 +cu12x), or the CUDA 13 meta package with its
# cudart extra (torch 2.11.0: cuda-toolkit[cublas,cudart,...]==13.0.2; its own METADATA then requires
# nvidia-cuda-runtime==13.0.96.*).
RUNTIME_NAMES = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime-cu12")
RUNTIME_EXTRA = "cudart"
# Any Python 3, as the py3-none tag says: the library holds no Python code.
KERNEL_REQUIRES_PYTHON = ">=3"


@dataclass(frozen=True)
class KernelPackage:
    """What the kernel wheel is made of: the conda kernel package's facts and its library, unpacked."""

    library: Path  # the package's lib/libflash_attn_kernels.so.1, a regular file
    name: str  # its conda name (libflash-attn-kernels)
    version: str  # 2.8.3.post2
    build: str  # cu130_sm80_90_100_120ptx_philox64_ha5d2e90_0
    subdir: str  # linux-64
    licenses: tuple[tuple[str, bytes], ...] = ()  # (file name, text) of its info/licenses/


def unpack_kernel_package(
    source: Path, prefix: Path, say: Callable[[str], None], *, name: str, version: str, build: str, subdir: str
) -> KernelPackage:
    """The conda kernel package at `source` (its facts given), unpacked into `prefix` by py-rattler, as the
    kernel wheel is made of it: its library, a regular file, and its info/licenses/ files, where one
    rattler-build left as a link into its recipe folder is that file of this checkout's recipe folder."""
    from rattler.package_streaming import extract  # noqa: PLC0415 (py-rattler: slow to import)

    say(f"+ extract {source} (py-rattler)")
    try:
        extract(source, prefix)
    except Exception as exc:  # py-rattler raises its own exception types
        raise FaforgeError(
            f"{source}: cannot be unpacked: {exc}", input=str(source), hint="rebuild or re-download it"
        ) from None
    library = prefix / "lib" / FLASH_ATTN.kernel_soname
    if not library.is_file() or library.is_symlink():
        raise FaforgeError(
            f"{source}: holds no regular file lib/{FLASH_ATTN.kernel_soname}",
            input=str(source),
            hint="rebuild it with this checkout's recipe",
        )
    licenses = []
    folder = prefix / "info" / "licenses"
    for entry in sorted(folder.iterdir()) if folder.is_dir() else ():
        recipe = paths.recipe_dir() / entry.name
        if entry.is_file() and not entry.is_symlink():
            licenses.append((entry.name, entry.read_bytes()))
        elif recipe.is_file():
            licenses.append((entry.name, recipe.read_bytes()))
    return KernelPackage(
        library=library, name=name, version=version, build=build, subdir=subdir, licenses=tuple(licenses)
    )


def runtime_range_of_kernel_wheel(cuda: str, torch_requires_dist: Iterable[str] | None = None) -> str:
    """The CUDA runtime requirement of a kernel wheel of `cuda` ('13.0'): PyPI's libcudart distribution of its
    major (faforge.wheelnames.cuda_runtime_dist), from `cuda` up to the next major. A function of the CUDA
    alone, so every kernel wheel of one kernel key has the same bytes whatever torch it was packed beside.
    `torch_requires_dist` (a torch's METADATA), when given, must require a runtime of that CUDA major."""
    major, minor = layout.parse_cuda(cuda)
    if torch_requires_dist is not None:
        _check_torch_runtime(torch_requires_dist, cuda, major)
    return f"{wheelnames.cuda_runtime_dist(cuda)}>={major}.{minor},<{major + 1}"


def _check_torch_runtime(torch_requires_dist: Iterable[str], cuda: str, major: int) -> None:
    found = []
    for text in torch_requires_dist:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        name = canonicalize_name(req.name)
        if name in RUNTIME_NAMES or (name == "cuda-toolkit" and RUNTIME_EXTRA in req.extras):
            found.append(req)
    if len(found) != 1:
        what = "no requirement" if not found else f"{len(found)} requirements ({', '.join(map(str, found))})"
        raise FaforgeError(
            f"the torch METADATA has {what} naming the CUDA runtime "
            f"(nvidia-cuda-runtime* or cuda-toolkit[{RUNTIME_EXTRA}])",
            hint="pass the METADATA of a CUDA build of torch from PyPI (a CPU torch requires none)",
        )
    req = found[0]
    pinned = [s.version for s in req.specifier if s.operator in ("==", "===", "~=", ">=")]
    if pinned and pinned[0].split(".")[0] != str(major):
        raise FaforgeError(
            f"the torch METADATA requires {req.name}{req.specifier}, CUDA {pinned[0]}, not the kernel's CUDA {cuda}",
            hint=f"pass the METADATA of a torch built for CUDA {major}.x",
        )


def pack_kernel_wheel(
    package: KernelPackage,
    *,
    runtime_requirement: str,
    out_dir: Path,
    say: Callable[[str], None] = lambda line: None,
    work: Path,
) -> BuiltWheel:
    """Write the kernel wheel of `package` into `out_dir` (`work`: a scratch folder for the patched library)."""
    started = time.monotonic()
    what = f"{package.name}-{package.version}-{package.build}"
    if package.name != FLASH_ATTN.kernel_package:
        raise FaforgeError(
            f"{what}: a {package.name} package, not {FLASH_ATTN.kernel_package}",
            hint=f"pass a {FLASH_ATTN.kernel_package} package",
        )
    if package.subdir not in SUBDIR_MACHINE:
        raise FaforgeError(
            f"{what}: built for {package.subdir}; pip wheels are built for {', '.join(SUBDIR_MACHINE)}",
            hint="pass a linux package",
        )
    label, number = wheelnames.kernel_label(package.build)
    cuda = wheelnames.cuda_of_label(label)
    assert cuda is not None  # kernel_label matched the build string, so its label starts cu<digits>
    runpath = layout.kernel_runpath(cuda)
    work.mkdir(parents=True, exist_ok=True)
    patched = work / FLASH_ATTN.kernel_soname
    identity = set_runpath(package.library, patched, runpath, say=say)
    if identity.soname != FLASH_ATTN.kernel_soname:
        raise FaforgeError(
            f"{what}: its library's SONAME is {identity.soname!r}, not {FLASH_ATTN.kernel_soname}",
            hint="rebuild it with the recipe of this checkout",
            exit_code=EXIT_PROBLEMS,
        )
    if identity.machine != SUBDIR_MACHINE[package.subdir]:
        raise FaforgeError(
            f"{what}: its library is for {identity.machine}, its package says {package.subdir}",
            hint="rebuild it",
            exit_code=EXIT_PROBLEMS,
        )
    cudart = [n for n in identity.needed if n.startswith("libcudart.so.")]
    if cudart != [f"libcudart.so.{cuda.split('.')[0]}"]:
        raise FaforgeError(
            f"{what}: its library needs {cudart or 'no shared CUDA runtime'}, "
            f"not libcudart.so.{cuda.split('.')[0]} of CUDA {cuda}",
            hint="the kernel library links -cudart shared, the runtime torch loads; rebuild it",
            exit_code=EXIT_PROBLEMS,
        )
    verdict = platform_tag([patched], inside=[FLASH_ATTN.kernel_soname], what=what)
    spec = WheelSpec(
        name=canonicalize_name(FLASH_ATTN.kernel_package),
        version=f"{package.version}+{label}",
        build_tag=number,
        python_tags=("py3",),
        abi_tags=("none",),
        platform_tags=(verdict.tag,),
        requires_dist=(runtime_requirement,),
        requires_python=KERNEL_REQUIRES_PYTHON,
        summary=f"{FLASH_ATTN.title} kernels (CUDA {cuda}, "
        f"{label.split('.', 1)[1]}), the conda build's library for pip",
        files={f"{layout.KERNEL_DIR}/__init__.py": b"", f"{layout.KERNEL_DIR}/{FLASH_ATTN.kernel_soname}": patched},
    )
    spec = replace(
        spec, files={**spec.files, **{f"{spec.dist_info}/licenses/{name}": text for name, text in package.licenses}}
    )
    path = write_wheel(spec, out_dir)
    return BuiltWheel(
        path=path,
        facts=read_wheel(path),
        verdict=verdict,
        runpath=runpath,
        gpu=identity.gpu,
        seconds=time.monotonic() - started,
    )
