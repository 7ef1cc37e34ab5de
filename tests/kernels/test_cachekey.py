"""CI cache keys: python variants share one, every other cell field that changes objects splits it."""

from __future__ import annotations

import dataclasses

import pytest

from faforge.kernels.cachekey import archs_of_tag, archs_tag, kernel_cache_key, torch_minor
from faforge.matrix import load_matrix


def test_archs_tag_is_key_safe():
    assert archs_tag("80;90;100;120+PTX") == "80_90_100_120ptx"
    assert archs_tag("80, 90+ptx") == "80_90ptx"


def test_torch_minor():
    assert torch_minor("2.14.1") == "2.14"


def test_key_names_every_object_relevant_field():
    cell = load_matrix().cells[0]
    key = kernel_cache_key(cell, "2.8.3.post2")
    assert key.startswith("ccache-v1-fa2.8.3.post2-")
    assert key.endswith(
        f"{cell.platform}-torch{torch_minor(cell.torch)}-cu{cell.cuda.replace('.', '')}-"
        f"abi{cell.cxx11_abi}-sm{archs_tag(cell.cuda_archs)}"
    )


def test_python_variants_share_a_key_and_other_fields_do_not():
    cells = load_matrix().cells
    cell = cells[0]
    assert kernel_cache_key(dataclasses.replace(cell, python="3.13")) == kernel_cache_key(cell)
    for field, value in (
        ("torch", "2.99.0"),
        ("cuda", "13.9"),
        ("cxx11_abi", 1 - cell.cxx11_abi),
        ("cuda_archs", "80"),
        ("platform", "linux-aarch64"),
    ):
        assert kernel_cache_key(dataclasses.replace(cell, **{field: value})) != kernel_cache_key(cell), field
    # The real matrix: fewer cache keys than cells, because pythons share.
    assert len({kernel_cache_key(c) for c in cells}) < len(cells)


def test_archs_of_tag_reads_back_archs_tag():
    for archs in ("80;90;100;120+PTX", "90", "90a;100f+PTX"):
        assert archs_of_tag(archs_tag(archs)) == archs
    for bad in ("", "80__90", "sm80", "80;90"):
        with pytest.raises(ValueError):
            archs_of_tag(bad)
