"""pip's layout and our wheels' names: where torch's and NVIDIA's libraries land in site-packages, the
RUNPATH each of our binaries gets, and the versions, local labels and build tags of our wheels.

pip unpacks every wheel into one site-packages folder:
  site-packages/torch/lib/                     libc10.so, libtorch*.so (torch's wheel)
  site-packages/nvidia/cu13/lib/               libcudart.so.13 (nvidia-cuda-runtime 13.x, which torch 2.11's
                                               cuda-toolkit[cudart]==13.0.2 pulls in; its RECORD)
  site-packages/nvidia/cuda_runtime/lib/       libcudart.so.12 (nvidia-cuda-runtime-cu12, CUDA 12 torches)
  site-packages/libflash_attn_kernels/         the kernel library (our kernel wheel)
  site-packages/flash_attn_2_cuda.*.so         the glue (our glue wheel), beside flash_attn/
  site-packages/<module>/_C.abi3.so            a stable-ABI extension inside its Python package
so each RUNPATH is relative to $ORIGIN and names only those folders: a binary loads before `import torch`,
and nothing is bundled that torch's wheels ship.
"""

from __future__ import annotations

import re

from faforge import wheelnames
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN

# The kernel wheel's package folder: the kernel library's name without `.so` (libflash_attn_kernels).
KERNEL_DIR = FLASH_ATTN.kernel_library.removesuffix(".so")
CUDA = re.compile(r"(?P<major>[1-9][0-9]?)\.(?P<minor>[0-9]{1,2})")
TORCH_MINOR = re.compile(r"(?P<major>[1-9][0-9]?)\.(?P<minor>[0-9]{1,3})")
# A cell's flash-attn build string: py312_torch2_11_cu130_cxx11abi1_h<hash>_<number>.
GLUE_BUILD = re.compile(
    r"py(?P<py>[0-9]{2,3})_torch(?P<tmajor>[0-9]+)_(?P<tminor>[0-9]+)_cu(?P<cuda>[0-9]{3,4})_cxx11abi(?P<abi>[01])"
    r"_h(?P<hash>[0-9a-f]{7,40})_(?P<number>[0-9]{1,6})"
)
ARCH = re.compile(r"[1-9][0-9]{1,2}[af]?(?:\+PTX)?")


def parse_cuda(cuda: str, option: str = "--cuda") -> tuple[int, int]:
    match = CUDA.fullmatch(cuda or "")
    if not match:
        raise FaforgeError(
            f"{option} {cuda[:40]!r} is not a CUDA version MAJOR.MINOR", hint="pass e.g. 13.0 or 12.8", input=cuda
        )
    return int(match["major"]), int(match["minor"])


def cuda_tag(cuda: str) -> str:
    """13.0 -> cu130, as torch's local labels and our build strings spell it."""
    major, minor = parse_cuda(cuda)
    return f"cu{major}{minor}"


def cuda_lib_dir(cuda: str) -> str:
    """Where NVIDIA's CUDA runtime wheel puts libcudart, relative to site-packages."""
    major, _ = parse_cuda(cuda)
    return "nvidia/cu13/lib" if major == 13 else "nvidia/cuda_runtime/lib" if major in (11, 12) else _unknown_cuda(cuda)


def _unknown_cuda(cuda: str) -> str:
    raise FaforgeError(
        f"--cuda {cuda}: no known pip layout of its runtime wheel (CUDA "
        "11 and 12: nvidia/cuda_runtime/lib, 13: nvidia/cu13/lib)",
        hint="read where its nvidia-cuda-runtime wheel's RECORD puts libcudart and add it to faforge.pipwheel.layout",
        input=cuda,
    )


def kernel_runpath(cuda: str) -> tuple[str, ...]:
    """site-packages/libflash_attn_kernels/ -> the CUDA runtime's folder."""
    return (f"$ORIGIN/../{cuda_lib_dir(cuda)}",)


def glue_runpath(cuda: str) -> tuple[str, ...]:
    """site-packages/ (the glue module sits at its top) -> the
    kernel wheel's folder, torch's libraries, the CUDA runtime."""
    return (f"$ORIGIN/{KERNEL_DIR}", "$ORIGIN/torch/lib", f"$ORIGIN/{cuda_lib_dir(cuda)}")


def package_runpath(cuda: str) -> tuple[str, ...]:
    """A stable-ABI extension inside its Python package, site-packages/<module>/ -> torch's libraries, the CUDA
    runtime."""
    return ("$ORIGIN/../torch/lib", f"$ORIGIN/../{cuda_lib_dir(cuda)}")


def torch_minor(torch: str, option: str = "--torch") -> tuple[int, int]:
    match = TORCH_MINOR.fullmatch(torch or "")
    if not match:
        raise FaforgeError(
            f"{option} {torch[:40]!r} is not a torch minor MAJOR.MINOR", hint="pass e.g. 2.11", input=torch
        )
    return int(match["major"]), int(match["minor"])


def torch_requirement(torch: str) -> str:
    """The one torch minor a glue wheel is built for, as a Requires-Dist: 2.11 -> torch>=2.11,<2.12."""
    major, minor = torch_minor(torch)
    return wheelnames.torch_requirement(f"{major}.{minor}")


def glue_label(torch: str, cuda: str, cxx11_abi: int) -> str:
    """The glue wheel's local label: torch minor, CUDA and C++ ABI (torch2.11.cu130.abi1)."""
    major, minor = torch_minor(torch)
    if cxx11_abi not in (0, 1):
        raise FaforgeError(
            f"--cxx11-abi {cxx11_abi!r} is not 0 or 1",
            hint="pass 1 for torch >= 2.7 from PyPI, 0 for torch <= 2.6",
            input=str(cxx11_abi),
        )
    return wheelnames.glue_label(f"{major}.{minor}", cuda_tag(cuda), cxx11_abi)


def glue_build_tag(build: str) -> str:
    """The wheel build tag of a glue: `<build number>h<hash>`, from the cell's flash-attn build string
    (py312_torch2_11_cu130_cxx11abi1_h1a2b3c4_0 -> 0h1a2b3c4) or given as such."""
    if re.fullmatch(r"[0-9]{1,6}h[0-9a-f]{7,40}", build or ""):
        return build
    match = GLUE_BUILD.fullmatch(build or "")
    if not match:
        raise FaforgeError(
            f"--build-tag {build[:120]!r} is neither NhHASH (0h1a2b3c4) nor a cell's build string "
            "(py312_torch2_11_cu130_cxx11abi1_h1a2b3c4_0)",
            hint="pass what `faforge matrix --world pypi` lists",
            input=build,
        )
    return wheelnames.build_tag(match.group(0))


def parse_archs(archs: str, option: str = "--archs") -> tuple[str, ...]:
    """'80;90a' (CUDA's arch list, ; or , between) -> ('80', '90a')."""
    items = tuple(a.strip() for a in re.split(r"[;,]", archs or "") if a.strip())
    bad = [a for a in items if not ARCH.fullmatch(a)]
    if not items or bad or len(set(items)) != len(items):
        why = f"{bad[0]!r} is not an arch" if bad else "it names an arch twice" if items else "it names no arch"
        raise FaforgeError(
            f"{option} {archs[:80]!r}: {why}", hint="pass e.g. '80;90a' (SM numbers, a/f variants, +PTX)", input=archs
        )
    return items


def arch_label(archs: tuple[str, ...]) -> str:
    """('80', '90a') -> sm80.90a; '120+PTX' -> 120ptx (as the kernel build strings spell it)."""
    return "sm" + ".".join(a.replace("+PTX", "ptx") for a in archs)
