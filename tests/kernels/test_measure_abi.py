"""`faforge bump`'s measured kernel-abi row (faforge.kernels.measure_abi), on real torch wheels.

The headers come from PyPI's real wheels by range requests, cached in the test cache's torch-headers/
(the layout measure_release uses, so tests/kernels/test_params_layout.py's downloads are reused), and
flash.h from the real flash-attn sdist (tests/gpu/flash_attn_sdist.py's cache folder).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from faforge.errors import EXIT_PROBLEMS
from faforge.kernels import kernel_abi
from faforge.kernels.measure_abi import (
    MEMBERS,
    RAW_HEADER,
    MeasureError,
    check_include_chain,
    fetch_headers,
    flash_sources,
    header_wheel,
    measure_release,
    verdict_of,
)
from faforge.matrix import load_matrix
from tests.gpu.flash_attn_sdist import SdistUnavailable, flash_attn_sdist
from tests.support.cache import TEST_CACHE, cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.pypi import pypi_listing

pytestmark = pytest.mark.slow  # every test measures headers read from PyPI's torch wheels


@pytest.fixture(scope="module")
def flash_src() -> Path:
    if not shutil.which("g++"):
        pytest.skip("needs g++")
    try:
        return flash_attn_sdist() / "csrc" / "flash_attn" / "src"
    except SdistUnavailable as exc:
        pytest.skip(str(exc))


def measured(version: str) -> kernel_abi.Verdict:
    policy = load_matrix().policy
    return measure_release(
        version, list(pypi_listing("torch").values()), TEST_CACHE, policy.flash_attn_version, policy.flash_attn_sha256
    )


@pytest.mark.parametrize("version", ["2.9.1", "2.13.0"])
def test_the_measured_row_is_the_recorded_one(flash_src, version):
    """The last 32-bit minor and a 64-bit one: measuring the release gives the row kernel-abi.yaml holds."""
    row = measured(version)
    recorded = kernel_abi.load_kernel_abi()[row.minor]
    print(kernel_abi.dump_row(row))
    assert (row.torch, row.wheel, row.sha256, row.offset_intragraph, row.sizes, row.verdict) == (
        recorded.torch,
        recorded.wheel,
        recorded.sha256,
        recorded.offset_intragraph,
        recorded.sizes,
        recorded.verdict,
    )
    assert row.source == f"{pypi_listing('torch')[row.wheel].url}#torch/include/{RAW_HEADER}"


def test_a_dumped_row_loads_back(tmp_path, flash_src):
    row = measured("2.13.0")
    path = tmp_path / "kernel-abi.yaml"
    path.write_text("schema: 1\ntorch:\n" + kernel_abi.dump_row(row))
    assert kernel_abi.load_kernel_abi(path) == {"2.13": row}


def test_the_cuda_stand_in_measures_what_the_toolkit_measures(tmp_path, flash_src):
    """bump runs without a CUDA toolkit: the two stand-in headers give the layout the real ones give."""
    try:
        cuda_include = cuda_home() / "include"
    except NoCudaToolkit as exc:
        pytest.skip(str(exc))
    for version in ("2.9.1", "2.13.0"):
        wheel = header_wheel(list(pypi_listing("torch").values()), version)
        include = fetch_headers(wheel, cache_dir("torch-headers"))
        real = verdict_of(version, wheel, include, flash_src, tmp_path / version / "real", cuda_include=cuda_include)
        assert verdict_of(version, wheel, include, flash_src, tmp_path / version / "stand-in") == real


def copied_headers(tmp_path: Path, version: str):
    wheel = header_wheel(list(pypi_listing("torch").values()), version)
    include = fetch_headers(wheel, cache_dir("torch-headers"))
    copy = tmp_path / "include"
    shutil.copytree(include, copy)
    return wheel, copy


def test_a_layout_no_kernel_library_has_is_refused(tmp_path, flash_src):
    """torch 2.13's real header with one more field in PhiloxCudaState: neither shim has that layout."""
    wheel, include = copied_headers(tmp_path, "2.13.0")
    raw = include / RAW_HEADER
    raw.write_text(
        raw.read_text().replace("bool captured_ = false;", "bool captured_ = false;\n  uint64_t generation_ = 0;")
    )
    with pytest.raises(MeasureError) as caught:
        verdict_of("2.13.0", wheel, include, flash_src, tmp_path / "work")
    message = caught.value.message
    print(message)
    assert caught.value.exit_code == EXIT_PROBLEMS
    assert f"{wheel.filename}: torch/include/{RAW_HEADER}" in message and "no kernel library" in message
    assert "size/align at::PhiloxCudaState: (40, 8) vs (32, 8)" in message


def test_a_header_that_does_not_compile_is_refused(tmp_path, flash_src):
    wheel, include = copied_headers(tmp_path, "2.13.0")
    raw = include / RAW_HEADER
    raw.write_text(raw.read_text().replace("uint64_t offset_intragraph_", "offset_type offset_intragraph_"))
    with pytest.raises(MeasureError) as caught:
        verdict_of("2.13.0", wheel, include, flash_src, tmp_path / "work")
    assert (
        f"{wheel.filename}: torch/include/{RAW_HEADER}" in caught.value.message
        and "did not compile" in caught.value.message
    )


def test_a_release_with_no_wheel_is_refused():
    with pytest.raises(MeasureError, match="lists no x86_64 CPython wheel"):
        header_wheel(list(pypi_listing("torch").values()), "2.99.0")


def test_a_struct_reached_through_other_headers_is_refused(tmp_path):
    """The four members stand for torch's include tree only while PhiloxCudaState.h includes nothing but
    <cstdint> and the raw header: one more include there could change the layout unseen."""
    _, include = copied_headers(tmp_path, "2.13.0")
    wheel = header_wheel(list(pypi_listing("torch").values()), "2.13.0").filename
    check_include_chain(include, wheel)  # the real headers pass
    state_h = include / MEMBERS[1]
    state_h.write_text(
        state_h.read_text().replace("#include <cstdint>", "#include <cstdint>\n#include <c10/macros/Macros.h>")
    )
    with pytest.raises(
        MeasureError,
        match=re.escape(f"{wheel}: torch/include/{MEMBERS[1]} includes more than <cstdint> and the raw header"),
    ):
        check_include_chain(include, wheel)


@pytest.mark.slow
def test_flash_h_comes_from_the_recipes_sdist_checked_against_its_sha256(tmp_path):
    """A fresh cache: the sdist is found on the index, checked, and only its headers are kept; a
    sha256 other than matrix.yaml's is refused and nothing is cached."""
    policy = load_matrix().policy
    with pytest.raises(MeasureError, match=f"variants/matrix.yaml says {'0' * 64}"):
        flash_sources(tmp_path / "wrong", policy.flash_attn_version, "0" * 64)
    assert not (tmp_path / "wrong").exists()
    src = flash_sources(tmp_path / "sdist", policy.flash_attn_version, policy.flash_attn_sha256)
    assert {"flash.h", "namespace_config.h"} <= {p.name for p in src.iterdir()}
    assert all(p.suffix == ".h" for p in src.rglob("*") if p.is_file())
