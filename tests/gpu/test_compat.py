"""CUDA's binary/PTX compatibility rules, as pure data (no GPU needed)."""

from __future__ import annotations

import doctest

import pytest

from faforge.gpu import compat
from faforge.gpu.compat import JIT, NATIVE, NONE, check, parse_arch

# (GPU capability, embedded SASS, embedded PTX, expected status, expected matching targets)
CASES = [
    # Plain SASS runs on the same major version, equal or newer minor.
    ((8, 0), ("sm_80",), (), NATIVE, ("sm_80",)),
    ((8, 6), ("sm_80",), (), NATIVE, ("sm_80",)),
    ((8, 9), ("sm_80", "sm_86"), (), NATIVE, ("sm_80", "sm_86")),
    ((8, 0), ("sm_86",), (), NONE, ()),  # older minor than the SASS
    ((9, 0), ("sm_80",), (), NONE, ()),  # newer major: SASS never crosses majors
    ((12, 0), ("sm_80", "sm_90"), (), NONE, ()),
    ((10, 3), ("sm_100",), (), NATIVE, ("sm_100",)),
    ((12, 1), ("sm_120",), (), NATIVE, ("sm_120",)),
    ((7, 5), ("sm_80",), (), NONE, ()),
    # Arch-specific `a` SASS: exactly that SM and nothing else.
    ((9, 0), ("sm_90a",), (), NATIVE, ("sm_90a",)),
    ((10, 0), ("sm_100a",), (), NATIVE, ("sm_100a",)),
    ((10, 3), ("sm_100a",), (), NONE, ()),
    ((12, 1), ("sm_120a",), (), NONE, ()),
    # Family-specific `f` SASS: same major, minor >= its own.
    ((10, 3), ("sm_100f",), (), NATIVE, ("sm_100f",)),
    ((10, 0), ("sm_103f",), (), NONE, ()),
    ((12, 0), ("sm_100f",), (), NONE, ()),
    ((12, 1), ("sm_120f",), (), NATIVE, ("sm_120f",)),
    # PTX JIT-compiles for its own arch and every newer one, across majors.
    ((9, 0), ("sm_80",), ("compute_80",), JIT, ("compute_80",)),
    ((12, 0), ("sm_80", "sm_90"), ("compute_90",), JIT, ("compute_90",)),
    ((8, 6), (), ("compute_80",), JIT, ("compute_80",)),
    ((8, 0), (), ("compute_86",), NONE, ()),
    ((9, 0), (), ("compute_90a",), JIT, ("compute_90a",)),
    ((10, 0), (), ("compute_90a",), NONE, ()),  # arch-specific PTX is not forward compatible
    ((10, 3), (), ("compute_100f",), JIT, ("compute_100f",)),
    ((12, 0), (), ("compute_100f",), NONE, ()),
    # Matching SASS wins over PTX.
    ((9, 0), ("sm_80", "sm_90"), ("compute_90",), NATIVE, ("sm_90",)),
    ((9, 0), ("sm_90a",), ("compute_80",), NATIVE, ("sm_90a",)),
    # Nothing embedded at all (a CPU-only build of the extension).
    ((9, 0), (), (), NONE, ()),
]


@pytest.mark.parametrize(("capability", "sass", "ptx", "status", "matching"), CASES)
def test_rules(capability, sass, ptx, status, matching):
    verdict = check(capability, sass, ptx)
    assert (verdict.status, verdict.matching) == (status, matching)
    assert verdict.can_run is (status != NONE)


def test_sm86_gpu_with_sm80_sass_passes():
    verdict = check((8, 6), ("sm_80",), ())
    assert verdict.status == NATIVE
    assert verdict.hint is None
    assert "sm_86" in verdict.message and "sm_80" in verdict.message


def test_sm90_gpu_with_only_sm80_sass_fails_naming_both():
    verdict = check((9, 0), ("sm_80",), ())
    assert not verdict.can_run
    assert "sm_90" in verdict.message and "sm_80" in verdict.message
    assert "90" in verdict.hint


def test_ptx_only_is_reported_as_slow():
    verdict = check((9, 0), ("sm_80",), ("compute_80",))
    assert verdict.can_run
    assert "JIT" in verdict.message and "slow" in verdict.message
    assert verdict.hint is not None


def test_duplicates_and_order_do_not_matter():
    assert check((8, 9), ("sm_86", "sm_80", "sm_86"), ()).matching == ("sm_80", "sm_86")


@pytest.mark.parametrize(
    ("name", "kind", "fields"),
    [
        ("sm_80", "sm", ("sm", 8, 0, "")),
        ("sm_90a", "sm", ("sm", 9, 0, "a")),
        ("sm_100f", "sm", ("sm", 10, 0, "f")),
        ("sm_121", "sm", ("sm", 12, 1, "")),
        ("compute_75", "compute", ("compute", 7, 5, "")),
    ],
)
def test_parse_arch(name, kind, fields):
    arch = parse_arch(name, kind)
    assert (arch.kind, arch.major, arch.minor, arch.suffix) == fields
    assert str(arch) == name


@pytest.mark.parametrize(
    ("name", "kind"), [("sm_9", "sm"), ("compute_80", "sm"), ("sm_80", "compute"), ("sm_90x", "sm"), ("80", "sm")]
)
def test_parse_arch_rejects_malformed_names(name, kind):
    with pytest.raises(ValueError, match=repr(name)):
        parse_arch(name, kind)


def test_docstring_examples():
    assert doctest.testmod(compat).failed == 0
