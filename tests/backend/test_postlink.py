"""faforge.backend.postlink: the ABI a binary's symbols declare, and the fixes after the link."""

from __future__ import annotations

import sysconfig
from pathlib import Path

from faforge.backend import postlink


def test_the_cxx11_abi_is_read_from_std_string_in_symbol_names():
    assert (
        postlink.declared_cxx11_abi(
            {"_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"}
        )
        == 1
    )
    assert postlink.declared_cxx11_abi({"_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"}) == 0
    assert postlink.declared_cxx11_abi({"PyInit_x"}) is None


def test_no_libpython_means_nothing_to_drop(tmp_path):
    """A Python whose link needed no libpython: the binary is left alone (patchelf is not even looked for)."""
    binary = tmp_path / "ext.so"
    binary.write_bytes(b"not touched")
    postlink.drop_libpython_needed(binary, None)
    assert binary.read_bytes() == b"not touched"


def test_dynamic_symbols_of_a_real_library():
    libpython = Path(sysconfig.get_config_var("LIBDIR")) / (sysconfig.get_config_var("LDLIBRARY") or "")
    if libpython.is_file() and libpython.suffix != ".a":
        assert "Py_Initialize" in postlink.dynamic_symbol_names(libpython)
