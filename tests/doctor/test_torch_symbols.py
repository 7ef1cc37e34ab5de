"""variants/torch_symbols.yaml against the real torch libraries it was read from.

Needs network once: torch/lib/libc10.so and libc10_cuda.so of every wheel listed in the table, read with HTTP range
requests (faforge.wheelfetch) and cached under the test cache (tests/support/cache.py) torch-libs/ (~40 MB).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

import pytest

from faforge.abi.elf import read_dynamic_symbols
from faforge.doctor.torch_symbols import EXPORT_LIBRARIES, built_for, exported_ranges, offered
from faforge.doctor.torch_symbols_file import default_table, dump_symbol_table, load_symbol_table
from faforge.versions import vtuple
from faforge.wheelfetch import FetchError, fetch_member, list_files
from tests.support.cache import cache_dir
from tests.support.docs import DOCTOR, doc_text
from tests.support.torch_envs import CACHE as VENV_CACHE

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "variants" / "torch_symbols.yaml"
LIBS = cache_dir("torch-libs")
TABLE_DATA = load_symbol_table(TABLE)


@functools.cache
def pypi_listing() -> dict:
    try:
        return {f.filename: f for f in list_files("torch")}
    except FetchError as exc:
        pytest.skip(f"PyPI's Simple API is not reachable ({exc}); the torch libraries are not cached yet")


def torch_library(wheel, library: str) -> Path:
    cached = LIBS / wheel.file / "torch" / "lib" / library
    if cached.is_file():
        return cached
    return fetch_member(pypi_listing()[wheel.file], f"torch/lib/{library}", LIBS)


def test_file_is_in_canonical_form():
    assert dump_symbol_table(TABLE_DATA) == TABLE.read_text()


@pytest.mark.slow  # reads PyPI's torch listing
def test_wheels_are_the_pypi_files_named():
    listing = pypi_listing()
    for wheel in TABLE_DATA.wheels:
        assert wheel.file in listing, wheel.file
        assert listing[wheel.file].sha256 == wheel.sha256, wheel.file
        assert listing[wheel.file].version == wheel.torch


@pytest.mark.slow
@pytest.mark.parametrize("wheel", TABLE_DATA.wheels, ids=lambda w: w.torch)
def test_every_form_is_exported_exactly_in_its_range(wheel):
    exports = {}
    for library in sorted({f.library for f in TABLE_DATA.functions}):
        exports[library] = read_dynamic_symbols(torch_library(wheel, library)).exports()
    for function in TABLE_DATA.functions:
        for form in function.forms:
            assert (form.symbol in exports[function.library]) == form.exported_by(wheel.torch), (
                f"{form.symbol} ({form.signature}) in torch {wheel.torch}: table says "
                f"{'exported' if form.exported_by(wheel.torch) else 'absent'}"
            )


@pytest.mark.slow
def test_exports_section_is_generated_from_the_wheels():
    """The `exports` section equals what exported_ranges reads from the wheels listed in the table.
    FAFORGE_UPDATE_TORCH_SYMBOLS=1 writes the regenerated file instead of failing."""
    exports = {
        (library, wheel.torch): read_dynamic_symbols(torch_library(wheel, library)).exports()
        for wheel in TABLE_DATA.wheels
        for library in EXPORT_LIBRARIES
    }
    regenerated = dump_symbol_table(dataclasses.replace(TABLE_DATA, exports=exported_ranges(TABLE_DATA, exports)))
    if os.environ.get("FAFORGE_UPDATE_TORCH_SYMBOLS") == "1":
        TABLE.write_text(regenerated)
    assert regenerated == TABLE.read_text(), "variants/torch_symbols.yaml's exports are stale; see its header"


def test_installed_torch_agrees_with_the_table():
    """The torch 2.14.1 venv the ABI tests built (when present) exports the forms the table predicts."""
    lib = next(iter(sorted(VENV_CACHE.glob("torch-2.14.1-py3.11*/lib/python3.11/site-packages/torch/lib"))), None)
    if lib is None or not (lib / "libc10_cuda.so").is_file():
        pytest.skip("no cached torch 2.14.1 venv (tests/support/torch_envs.py builds it for the ABI and doctor tests)")
    exports = read_dynamic_symbols(lib / "libc10_cuda.so").exports()
    forms = offered(TABLE_DATA, "c10::cuda::SetDevice", exports)
    assert [f.signature for f in forms] == ["c10::cuda::SetDevice(signed char, bool)"]
    assert all(f.exported_by("2.14.1") for f in forms)


@pytest.mark.parametrize(
    ("symbols", "words", "first", "last"),
    [
        (["_ZN3c104cuda9SetDeviceEi"], "torch 2.1-2.2", "2.1.0", "2.2.2"),
        (["_ZN3c104cuda9SetDeviceEa"], "torch 2.3-2.7", "2.3.0", "2.7.1"),
        (
            ["_ZN3c104cuda9SetDeviceEab", "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_jb"],
            "torch 2.10-2.13",
            "2.10.0",
            "2.13.0",
        ),
        (
            ["_ZN3c104cuda9SetDeviceEab", "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib"],
            "torch 2.8-2.9",
            "2.8.0",
            "2.9.0",
        ),
        (["_ZNK3c106SymIntltEl"], "torch 1.13-2.0", "1.13.1", "2.0.1"),
    ],
)
def test_built_for_intersects_ranges(symbols, words, first, last):
    result = built_for(TABLE_DATA, [*symbols, "_ZN3c106detail14torchCheckFailEPKcS2_jS2_"])
    assert (result.words, result.first, result.last) == (words, first, last)
    assert result.covers(first) and result.covers(last + "+cu121")
    assert not result.covers(".".join(map(str, (vtuple(last)[0], vtuple(last)[1] + 1, 0))))


def test_open_ended_and_contradictory_ranges():
    newest = built_for(TABLE_DATA, ["_ZN3c104cuda9SetDeviceEab"])
    assert newest.last is None and newest.words == f"torch 2.8 or newer (checked through {TABLE_DATA.newest_checked})"
    mixed = built_for(TABLE_DATA, ["_ZN3c104cuda9SetDeviceEi", "_ZN3c104cuda9SetDeviceEab"])
    assert not mixed.consistent and "different releases" in mixed.words
    assert not built_for(TABLE_DATA, ["_ZN3c106detail14torchCheckFailEPKcS2_jS2_"]).known


def test_the_default_table_is_the_checked_in_file():
    assert default_table() == TABLE_DATA


def test_bad_table_names_file_key_and_value(tmp_path):
    bad = tmp_path / "torch_symbols.yaml"
    bad.write_text(TABLE.read_text().replace("first: 2.3.0", "first: 2.3.5"))
    with pytest.raises(Exception, match=r"functions\[0\]\.forms\[1\]\.first: 2\.3\.5 is not among the wheels checked"):
        load_symbol_table(bad)


def test_readme_states_the_table_size():
    """The doctor page quotes how many symbols and wheels the table holds."""
    symbols = sum(len(e.symbols) for e in TABLE_DATA.exports)
    text = " ".join(doc_text(DOCTOR).split())
    assert (
        f"plus the {symbols} c10 symbols that libc10.so and libc10_cuda.so of {len(TABLE_DATA.wheels)} "
        "PyPI torch wheels" in text
    )
