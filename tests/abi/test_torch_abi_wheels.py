"""torch.cxx11_abi against real PyPI torch wheels.

PyPI's x86_64 torch wheels up to 2.6 are pre-C++11 ABI and from 2.7 C++11 ABI; the manylinux_2_28
aarch64 wheels are C++11 ABI. Every x86_64 cp311 release from 2.1 on that PyPI lists is checked,
so a new release is covered without editing this file. Only torch/lib/libc10.so is read from each
wheel (HTTP range requests, ~0.3-0.5 MB compressed each), cached in the test cache's torch-libs/
beside the ones tests/doctor/test_torch_symbols.py reads.
"""

from __future__ import annotations

import re

import pytest

from faforge.abi import classify
from faforge.abi.check import torch_facts
from faforge.abi.elf import read_dynamic_symbols
from faforge.versions import vtuple
from faforge.wheelfetch import RemoteFile, fetch_member
from tests.support.cache import cache_dir
from tests.support.pypi import pypi_listing

pytestmark = pytest.mark.slow  # every test reads PyPI's torch wheels

LIBS = cache_dir("torch-libs")
X86_64 = re.compile(r"torch-(?P<version>\d+\.\d+\.\d+)-cp311-cp311-manylinux(?:1|_2_28)_x86_64\.whl")
AARCH64 = "torch-2.7.1-cp311-cp311-manylinux_2_28_aarch64.whl"
FIRST_CXX11 = (2, 7)  # PyPI torch switched its Linux wheels to the C++11 ABI in 2.7 (CONTEXT.md section 2)
# c10::Error(SourceLocation, std::string): the constructor every torch exports, in each spelling.
ERROR_CTOR = {
    0: "_ZN3c105ErrorC2ENS_14SourceLocationESs",
    1: "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
}


def listing() -> dict[str, RemoteFile]:
    return pypi_listing("torch")


def x86_64_releases() -> list[str]:
    """The cp311 x86_64 wheel of every torch release from 2.1 on (one per version, manylinux1 before 2.7)."""
    found = {}
    for name in listing():
        match = X86_64.fullmatch(name)
        if match and vtuple(match["version"]) >= (2, 1):
            found.setdefault(match["version"], name)
    return [found[v] for v in sorted(found, key=vtuple)]


def libc10(wheel: str):
    cached = LIBS / wheel / "torch" / "lib" / "libc10.so"
    return cached if cached.is_file() else fetch_member(listing()[wheel], "torch/lib/libc10.so", LIBS)


def test_every_pypi_torch_from_2_1_has_the_abi_it_was_released_with():
    wheels = x86_64_releases()
    assert len(wheels) >= 20, wheels  # 2.1.0 ... 2.15.0 at the time of writing
    rows, wrong = [], []
    for wheel in wheels:
        lib = libc10(wheel)
        version = X86_64.fullmatch(wheel)["version"]
        expected = int(vtuple(version)[:2] >= FIRST_CXX11)
        got = torch_facts([lib.parent]).cxx11_abi
        whole_table = classify.cxx11_abi_of(read_dynamic_symbols(lib).exports())
        ctor = ERROR_CTOR[expected] in read_dynamic_symbols(lib).exports()
        rows.append(
            f"{version:8} expected {expected} got {got} (all exported names say {whole_table}; "
            f"c10::Error ctor in that ABI: {ctor})"
        )
        if got != expected or not ctor:
            wrong.append(version)
    print("\n".join(rows))
    assert not wrong, "\n".join(rows)


def test_aarch64_wheel_is_cxx11_abi():
    lib = libc10(AARCH64)
    facts = torch_facts([lib.parent])
    assert (facts.machine, facts.cxx11_abi) == ("aarch64", 1)
    assert ERROR_CTOR[1] in read_dynamic_symbols(lib).exports()
