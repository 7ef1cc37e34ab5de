"""Name interpretation: the C++ ABI from mangled names, signatures, search keys, versions."""

from __future__ import annotations

import pytest

from faforge.abi import classify, demangle, signature
from faforge.abi.elf import read_dynamic_symbols
from tests.abi.test_elf import system_library

needs_demangler = pytest.mark.skipif(not demangle.available(), reason="no libstdc++.so.6 to demangle with")

# mangled -> (demangled, qualified name, parameters, search key); the names are torch's (CONTEXT.md §1)
# or libstdc++'s, and the key must occur in the mangled name itself.
NAMES = {
    "_ZN3c104cuda9SetDeviceEab": (
        "c10::cuda::SetDevice(signed char, bool)",
        "c10::cuda::SetDevice",
        "(signed char, bool)",
        "3c104cuda9SetDevice",
    ),
    "_ZN3c105ErrorC2ENS_14SourceLocationESs": (
        "c10::Error::Error(c10::SourceLocation, std::string)",
        "c10::Error::Error",
        "(c10::SourceLocation, std::string)",
        "3c105Error",
    ),
    "_ZNK3c105Error3msgB5cxx11Ev": (
        "c10::Error::msg[abi:cxx11]() const",
        "c10::Error::msg[abi:cxx11]",
        "() const",
        "3c105Error3msg",
    ),
    "_ZN2at6native3fooIfEEvi": (
        "void at::native::foo<float>(int)",
        "at::native::foo<float>",
        "(int)",
        "2at6native3foo",
    ),
    "_ZTIN3c105ErrorE": ("typeinfo for c10::Error", "c10::Error", None, "3c105Error"),
    "_ZN12_GLOBAL__N_13fooEi": ("(anonymous namespace)::foo(int)", "(anonymous namespace)::foo", "(int)", "3foo"),
    "_ZNK3c106SymIntltEl": (
        "c10::SymInt::operator<(long) const",
        "c10::SymInt::operator<",
        "(long) const",
        "3c106SymInt",
    ),
    "_ZN3c1010TensorImplD2Ev": (
        "c10::TensorImpl::~TensorImpl()",
        "c10::TensorImpl::~TensorImpl",
        "()",
        "3c1010TensorImpl",
    ),
    "_ZThn8_N3c105Error4whatEv": (
        "non-virtual thunk to c10::Error::what()",
        "c10::Error::what",
        "()",
        "3c105Error4what",
    ),
    "_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE": (
        "at::_ops::add_Tensor::call(at::Tensor const&, at::Tensor const&, c10::Scalar const&)",
        "at::_ops::add_Tensor::call",
        "(at::Tensor const&, at::Tensor const&, c10::Scalar const&)",
        "2at4_ops10add_Tensor4call",
    ),
    "_ZN3c1013intrusive_ptrINS_10TensorImplENS_6detail34intrusive_target_default_null_typeIS1_EEE6reset_Ev": (
        "c10::intrusive_ptr<c10::TensorImpl, "
        "c10::detail::intrusive_target_default_null_type<c10::TensorImpl> >::reset_()",
        "c10::intrusive_ptr<c10::TensorImpl, "
        "c10::detail::intrusive_target_default_null_type<c10::TensorImpl> >::reset_",
        "()",
        "6reset_",
    ),
}


@needs_demangler
@pytest.mark.parametrize("mangled", NAMES)
def test_signature_and_search_key(mangled):
    text, qualified, parameters, key = NAMES[mangled]
    assert demangle.demangle(mangled) == text
    parsed = signature.parse_signature(text)
    assert (parsed.qualified_name, parsed.parameters) == (qualified, parameters)
    assert signature.search_key(qualified) == key
    assert key in mangled


def test_demangle_passes_c_names_and_rejects_garbage():
    assert demangle.demangle("cudaSetDevice") == "cudaSetDevice"
    if demangle.available():
        assert demangle.demangle("_Zgarbage") is None


@pytest.mark.parametrize(
    ("name", "abi"),
    [
        ("_ZN3c105ErrorC2ENS_14SourceLocationESs", 0),
        ("_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", 1),
        ("_ZNK3c105Error3msgB5cxx11Ev", 1),
        ("_ZN3c104cuda9SetDeviceEab", None),
        ("_Z4xSsyv", None),  # an identifier that contains "Ss" is not std::string
        ("Ss_plain_c_symbol", None),
    ],
)
def test_abi_of_name(name, abi):
    assert classify.abi_of_name(name) == abi


def test_cxx11_abi_of_fixtures(stand_ins):
    for (_, abi), folder in stand_ins.items():
        names = read_dynamic_symbols(folder / "libc10_cuda.so").names
        assert classify.cxx11_abi_of(names) == abi
        counts = classify.cxx11_abi_counts(names)  # its own device_name plus what it imports from libstdc++
        assert counts[abi] >= 1 and counts[1 - abi] == 0
        assert classify.cxx11_abi_of(read_dynamic_symbols(folder / "libc10.so").names) is None


def test_cxx11_abi_counts_equal_abi_of_name_over_libstdcxx():
    """libstdc++ exports both ABIs; the fast joined-text count must equal the per-name rule."""
    names = read_dynamic_symbols(system_library("libstdc++.so.6")).names
    per_name = [classify.abi_of_name(n) for n in names]
    assert classify.cxx11_abi_counts(names) == (per_name.count(0), per_name.count(1))
    assert per_name.count(0) > 100 and per_name.count(1) > 100


def test_abi_neutral_equates_both_spellings():
    old = "c10::Error::Error(c10::SourceLocation, std::string)"
    new = (
        "c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char, std::char_traits<char>, "
        "std::allocator<char> >)"
    )
    assert signature.abi_neutral(old) == signature.abi_neutral(new)
    assert signature.abi_neutral("c10::Error::msg[abi:cxx11]() const") == "c10::Error::msg() const"


def test_versions():
    names = [
        "GLIBC_2.2.5",
        "GLIBC_2.28",
        "GLIBC_2.17",
        "GLIBCXX_3.4.9",
        "GLIBCXX_3.4.30",
        "CXXABI_1.3.13",
        "libcudart.so.13",
        "GCC_3.0",
    ]
    assert classify.newest_versions(names) == {
        "CXXABI": "CXXABI_1.3.13",
        "GCC": "GCC_3.0",
        "GLIBC": "GLIBC_2.28",
        "GLIBCXX": "GLIBCXX_3.4.30",
    }
    assert classify.glibc_above(names, (2, 17)) == ["GLIBC_2.28"]
    assert classify.glibc_above(names, (2, 28)) == []
    assert classify.parse_version("libcudart.so.13") is None
