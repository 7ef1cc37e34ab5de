"""faforge.backend.flags: the C++ standard a torch's headers need, and upstream's nvcc flags."""

from __future__ import annotations

import pytest

from faforge.backend import flags as build


@pytest.mark.parametrize(
    ("torch", "std"),
    [("2.4.1", "c++17"), ("2.13.0", "c++17"), ("2.14.1+cu130", "c++20"), ("2.15.0", "c++20"), ("3.0.0", "c++20")],
)
def test_cxx_standard_follows_torch_headers(torch, std):
    assert build.cxx_standard(torch) == std


def test_the_kernel_library_keeps_upstreams_standard_and_flags():
    assert build.KERNEL_CXX_STD == "c++17"
    assert build.NVCC_FLAGS[0] == "-O3" and "--use_fast_math" in build.NVCC_FLAGS
