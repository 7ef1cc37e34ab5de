"""Compiler flags both parts share: upstream's nvcc flags and the C++ standard a torch needs."""

from __future__ import annotations

import re

# Oldest torch whose headers need C++20 (std::strong_ordering in intrusive_ptr.h).
CXX20_FROM_TORCH = (2, 14)
# The kernel library needs no torch header, so no torch decides its C++ standard: upstream's.
KERNEL_CXX_STD = "c++17"

NVCC_FLAGS = [
    "-O3",
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "--use_fast_math",
]


def cxx_standard(torch_version: str) -> str:
    release = re.match(r"(\d+)\.(\d+)", torch_version)
    if release is None:
        raise ValueError(f"torch version {torch_version!r}: expected one that starts MAJOR.MINOR, such as 2.9.0")
    major, minor = (int(x) for x in release.groups())
    return "c++20" if (major, minor) >= CXX20_FROM_TORCH else "c++17"
