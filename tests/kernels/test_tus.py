"""Kernel TU names and the 72-TU grid of flash-attn 2.8."""

from __future__ import annotations

import re

import pytest

from faforge.errors import FaforgeError
from faforge.kernels.tus import class_counts, default_grid, parse_tu, sdist_tus
from tests.gpu.flash_attn_sdist import SdistUnavailable, flash_attn_sdist


def test_parse_tu_reads_class_hdim_dtype_causal():
    tu = parse_tu("csrc/flash_attn/src/flash_fwd_split_hdim256_bf16_causal_sm80.cu")
    assert (tu.tu_class, tu.hdim, tu.dtype, tu.causal) == ("fwd_split", 256, "bf16", True)
    assert parse_tu("flash_fwd_hdim32_fp16_sm80.cu").tu_class == "fwd"


def test_parse_tu_rejects_other_files():
    with pytest.raises(FaforgeError, match=re.escape("flash_api.cpp")):
        parse_tu("flash_api.cpp")


def test_default_grid_is_72_tus_24_per_class():
    grid = default_grid()
    assert len(grid) == len({t.name for t in grid}) == 72
    assert class_counts(grid) == {"fwd": 24, "fwd_split": 24, "bwd": 24}


@pytest.mark.slow  # the flash-attn sdist from PyPI
def test_default_grid_matches_a_real_sdist():
    """PyPI's flash-attn 2.8.3.post2 sdist (downloaded once, sha256-checked): it skipped in every CI run
    while it looked for a developer machine's unpacked copy."""
    try:
        sdist = flash_attn_sdist()
    except SdistUnavailable as exc:
        pytest.skip(str(exc))
    assert sorted(t.name for t in sdist_tus(sdist)) == sorted(t.name for t in default_grid())
