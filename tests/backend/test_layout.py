"""faforge.backend.layout: the Philox layout of a torch (read from its header) and of a kernel library."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from faforge.backend import layout as build
from faforge.backend.errors import BuildError


def test_a_kernel_library_without_a_layout_symbol_is_refused_naming_it():
    """--kernel-library pointing at some other shared library (here CPython's own libpython, a real ELF
    file nobody here built) is named as not a kernel library, before anything compiles."""
    libpython = Path(sysconfig.get_config_var("LIBDIR")) / sysconfig.get_config_var("LDLIBRARY")
    if not libpython.is_file():
        pytest.skip(f"this Python has no shared libpython ({libpython})")
    with pytest.raises(
        BuildError, match=r"defines no flash_attn_kernels_philox_offset_intragraph_u32/u64 symbol"
    ) as caught:
        build.check_kernel_library_layout(libpython, 64, "2.14.1")
    assert str(libpython) in str(caught.value) and "--kernels-only" in str(caught.value)


@pytest.mark.parametrize("bits", [32, 64])
def test_philox_width_is_read_from_the_header(tmp_path, bits):
    header = tmp_path / build.PHILOX_HEADER
    header.parent.mkdir(parents=True)
    header.write_text(f"struct PhiloxCudaState {{\n  uint64_t seed_;\n  uint{bits}_t offset_intragraph_ = 0;\n}};\n")
    assert build.philox_offset_bits(str(tmp_path)) == bits


def test_an_unreadable_or_unknown_philox_header_is_named(tmp_path):
    with pytest.raises(BuildError, match="is this torch's include folder complete"):
        build.philox_offset_bits(str(tmp_path))
    header = tmp_path / build.PHILOX_HEADER
    header.parent.mkdir(parents=True)
    header.write_text("struct PhiloxCudaState { int64_t offset_intragraph_; };\n")
    with pytest.raises(BuildError, match="new to the build script"):
        build.philox_offset_bits(str(tmp_path))


def test_only_the_non_default_layout_gets_a_define():
    """The default layout's objects and compiler-cache keys stay as they were before the define existed."""
    assert build.philox_define(64) == []
    assert build.philox_define(32) == ["-DFAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS=32"]
