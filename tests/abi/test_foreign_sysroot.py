"""An aarch64 extension checked on this x86_64 machine against an aarch64 torch (the aarch64 cells).

Found on the real flash-attn 2.8.3.post2 glue cross-compiled against PyPI's aarch64 torch 2.11.0: the
system library path check-abi searches is the host's, whose libstdc++ is x86_64 and skipped, so the
std:: symbols the extension imports have no provider; and libtorch_python.so exports a constructor of
std::runtime_error with another signature (the move constructor). check-abi then called three
std::runtime_error constructors `signature-drift` against libtorch_python.so (exit 1) for a binary that
is fine; naming the cross sysroot with --library-dir gave exit 0. The fixture has the same shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.abi import elf_fixtures as fx
from tests.support.tiers import slow

SYSROOT_LIB = fx.AARCH64_SYSROOT_LIB
# A torch library that, like PyPI's aarch64 libtorch_python.so, exports std::runtime_error's move
# constructor (defined here under its mangled name, as torch's build emits its own copy).
TORCH_SOURCE = """
extern "C" void runtime_error_move() __asm__("_ZNSt13runtime_errorC1EOS_");
extern "C" void runtime_error_move() {}
extern "C" void c10_anchor() {}
"""
EXTENSION_SOURCE = """
#include <stdexcept>
extern "C" void c10_anchor();
extern "C" void* PyInit_fixture_ext() { return nullptr; }
extern "C" void fail() { c10_anchor(); throw std::runtime_error("x"); }
"""


@pytest.fixture
@slow("aarch64 g++ compiles")
def foreign(tmp_path):
    tool = fx.aarch64_gxx()
    if tool is None or not (SYSROOT_LIB / "libstdc++.so.6").exists():
        pytest.skip("needs aarch64-linux-gnu-g++ and its sysroot (Debian g++-aarch64-linux-gnu)")
    lib = tmp_path / "torch/lib"
    fx.compile_shared(tool, TORCH_SOURCE, lib / "libc10.so", defines={}, flags=["-Wl,-soname,libc10.so"])
    ext = fx.compile_shared(
        tool, EXTENSION_SOURCE, tmp_path / "fixture_ext.so", defines={}, flags=[f"-L{lib}", "-lc10"]
    )
    return ext, lib


def check_abi(ext: Path, lib: Path, *extra: str) -> tuple[int, dict]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "check-abi",
            str(ext),
            "--against",
            str(lib),
            "--platform",
            "linux-aarch64",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
    )
    return done.returncode, json.loads(done.stdout)


def test_with_the_cross_sysroot_named_the_extension_passes(foreign):
    code, report = check_abi(*foreign, "--library-dir", str(SYSROOT_LIB))
    assert (code, report["problems"]) == (0, [])


def test_without_a_sysroot_std_symbols_are_not_blamed_on_torch(foreign):
    """The host's libstdc++ is x86_64 and skipped, so the target's is not found: its symbols are
    unverified, not drift against torch's same-name export, and the verdict cannot be told (exit 3)
    until the target's sysroot is named ("cannot tell", never OK)."""
    code, report = check_abi(*foreign)
    assert [p for p in report["problems"] if (p["symbol"] or "").startswith("_ZNSt")] == []
    assert (code, report["verdict"]) == (3, "cannot-tell") and report["modules"][0]["unresolved_unverified"] >= 1
    assert "libstdc++.so.6" in [u["name"] for u in report["unverified_libraries"]]
