"""faforge.backend.archs: arch lists, what nvcc and the kernels support, -gencode flags."""

from __future__ import annotations

import pytest

from faforge.backend import archs as build
from faforge.backend.errors import BuildError
from faforge.matrix import load_matrix


def test_arch_list_parsing_and_gencode():
    archs = build.parse_arch_list("80;90;120+PTX")
    assert archs == [(80, False), (90, False), (120, True)]
    assert build.gencode_flags(archs) == [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=sm_90",
        "-gencode",
        "arch=compute_120,code=sm_120",
        "-gencode",
        "arch=compute_120,code=compute_120",
    ]


@pytest.mark.parametrize(
    ("archs", "nvcc", "message"),
    [
        ("70;80", (12, 4), "sm_70: flash-attn 2 kernels need sm_80"),
        ("80;100", (12, 6), "sm_100 needs nvcc 12.8 or newer, this one is 12.6"),
        ("80;120+PTX", (12, 4), "sm_120 needs nvcc 12.8"),
        ("eighty", (13, 0), "'eighty' is not an SM number"),
    ],
)
def test_unsupported_archs_are_refused_with_the_reason(archs, nvcc, message):
    with pytest.raises(BuildError, match=message):
        build.check_archs_supported(build.parse_arch_list(archs), nvcc)


def test_every_matrix_arch_list_fits_its_cuda(repo):
    for cell in load_matrix(repo).cells:
        nvcc = tuple(int(x) for x in cell.cuda.split("."))
        build.check_archs_supported(build.parse_arch_list(cell.cuda_archs), nvcc)


def test_another_familys_floor_is_a_parameter():
    """FA3's hopper kernels start at sm_90: the same check with its floor and name."""
    build.check_archs_supported([(80, False)], (12, 8))
    with pytest.raises(BuildError, match="sm_80: flash-attn 3 kernels need sm_90 or newer"):
        build.check_archs_supported([(80, False)], (12, 8), min_sm=90, family="flash-attn 3")


def test_arch_names_are_the_plans_spelling():
    assert build.arch_names([(90, False), (120, True)]) == ["sm_90", "sm_120+PTX"]
    assert build.arch_names(build.parse_arch_list("sm_80, 9.0")) == ["sm_80", "sm_90"]


def test_an_empty_arch_list_names_the_setting():
    with pytest.raises(BuildError, match="FLASH_ATTN_CUDA_ARCHS"):
        build.parse_arch_list(" ; ")
