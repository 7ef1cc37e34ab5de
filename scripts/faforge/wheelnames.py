"""Our wheels' names (the pip world), in one home: the local labels, build tags and torch pin that the matrix
plans (faforge.matrix.pip_builds) and faforge.pipwheel writes, so a planned name is the built one.

- kernel wheel: the flash-attn version, the kernel package's conda build string less its build number as
  the local label, the number as the build tag: cu130_sm80_90_100_120ptx_philox64_ha5d2e90_0 ->
  2.8.3.post2+cu130.sm80.90.100.120ptx.philox64.ha5d2e90, build tag 0;
- glue wheel: the local label names the torch minor, CUDA and C++ ABI (torch2.11.cu130.abi1), the build tag
  the build number and identity hash of the cell's build string (py312_..._h1a2b3c4_0 -> 0h1a2b3c4);
- the glue's torch requirement: its one minor, torch>=2.11,<2.12.
"""

from __future__ import annotations

import re

from faforge.errors import FaforgeError

# The kernel package's build string (recipes/flash-attn/recipe.yaml):
# cu130_sm80_90_100_120ptx_philox64_h<hash>_<number>.
KERNEL_BUILD = re.compile(
    r"cu(?P<cuda>[0-9]{3,4})_sm(?P<archs>[0-9a-z]+(?:_[0-9a-z]+)*)_philox(?P<bits>32|64)_h(?P<hash>[0-9a-f]{7,40})"
    r"_(?P<number>[0-9]{1,6})"
)
# A build string's identity tail: _h<hash>_<number>.
IDENTITY = re.compile(r"_h(?P<hash>[0-9a-f]{7,40})_(?P<number>[0-9]{1,6})$")
# The labels as written below, read back (the index places a wheel by them, verify finds its cell):
# a glue's torch2.11.cu130.abi1; a kernel's cu130.sm80.90.100.120ptx.philox64.h<hash>; a stable-ABI wheel's CUDA
# and arch list, cu130.sm80.90a.
GLUE_LABEL = re.compile(r"torch(?P<torch>[0-9]+\.[0-9]+)\.cu(?P<cuda>[0-9]{3,4})\.abi(?P<abi>[01])")
CUDA_ARCHS_LABEL = re.compile(r"cu(?P<cuda>[0-9]{3,4})\.sm(?P<archs>[0-9a-z]+(?:\.[0-9a-z]+)*)")
CUDA_LABEL = re.compile(r"cu(?P<cuda>[0-9]{3,4})(?:\..*)?")


def kernel_label(build_string: str) -> tuple[str, str]:
    """The kernel package's conda build string -> (the kernel wheel's local label, its build tag)."""
    match = KERNEL_BUILD.fullmatch(build_string)
    if not match:
        raise FaforgeError(
            f"{build_string[:120]!r} is not a kernel package's build "
            "string (cu<cuda>_sm<archs>_philox<bits>_h<hash>_<number>)",
            hint="pass a kernel package that `faforge build` made",
            input=build_string,
        )
    return build_string.removesuffix(f"_{match['number']}").replace("_", "."), match["number"]


def glue_label(torch_minor: str, cuda_tag: str, cxx11_abi: int) -> str:
    """'2.11', 'cu130', 1 -> 'torch2.11.cu130.abi1'."""
    return f"torch{torch_minor}.{cuda_tag}.abi{cxx11_abi}"


def cuda_of_label(label: str) -> str | None:
    """The CUDA a kernel or stable-ABI wheel's label starts with: 'cu130.sm80...' -> '13.0' (the last digit is the
    minor, as torch's and conda-forge's tags spell it); None for another label."""
    match = CUDA_LABEL.fullmatch(label or "")
    return f"{match['cuda'][:-1]}.{match['cuda'][-1]}" if match else None


def build_tag(build_string: str) -> str:
    """A wheel build tag from a build string's identity:
    '..._h1a2b3c4_0' -> '0h1a2b3c4' (PEP 427: starts with a digit)."""
    match = IDENTITY.search(build_string)
    if not match:
        raise FaforgeError(
            f"{build_string[:120]!r} does not end in _h<hash>_<number>",
            hint="pass a build string the matrix lists",
            input=build_string,
        )
    return f"{match['number']}h{match['hash']}"


def cuda_runtime_dist(cuda: str) -> str:
    """PyPI's distribution holding libcudart for a CUDA release: NVIDIA names it nvidia-cuda-runtime-cu11/-cu12
    up to CUDA 12 and nvidia-cuda-runtime from CUDA 13 (https://pypi.org/project/nvidia-cuda-runtime-cu12/;
    torch 2.11.0's and 2.14.1's cuda-toolkit[cudart]==13.0.x requires nvidia-cuda-runtime==13.0.96.*)."""
    major = int(cuda.split(".")[0])
    return "nvidia-cuda-runtime" if major >= 13 else f"nvidia-cuda-runtime-cu{major}"


def torch_requirement(torch_minor: str) -> str:
    """'2.11' -> 'torch>=2.11,<2.12': the one torch minor a glue wheel is built for."""
    major, minor = (int(p) for p in torch_minor.split(".")[:2])
    return f"torch>={major}.{minor},<{major}.{minor + 1}"
