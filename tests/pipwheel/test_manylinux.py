"""faforge.pipwheel.manylinux against auditwheel itself: small real shared libraries, compiled here with
this machine's gcc (glibc 2.36), each judged by our verdict and by auditwheel's analyze_wheel_abi on a
wheel holding it, with the libraries that are external by design excluded as `auditwheel repair
--exclude` excludes them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from auditwheel.wheel_abi import analyze_wheel_abi

from faforge.errors import FaforgeError
from faforge.pipwheel.manylinux import EXTERNAL, LinuxPlatform, is_external, linux_platform, platform_tag
from faforge.pipwheel.writer import WheelSpec, write_wheel
from tests.support.tiers import slow

SOURCES = {
    # only __cxa_finalize@GLIBC_2.2.5: the oldest policy auditwheel has
    "plain": ('extern "C" int plain(int x) { return x + 1; }', []),
    # std::string of the C++11 ABI: GLIBCXX_3.4.21 (manylinux_2_24)
    "cxx": ('#include <string>\nextern "C" unsigned long cxx(const char* s) { return std::string(s).size(); }', []),
    # pthread_create lives in libc from glibc 2.34 on: GLIBC_2.34
    "pthread": (
        '#include <pthread.h>\nextern "C" int th(void* (*f)(void*)) { pthread_t t; return pthread_create(&t, '
        "nullptr, f, nullptr); }",
        [],
    ),
    # zlib's uncompress2, blacklisted from libz.so.1 by the policies up to manylinux_2_31 (auditwheel's blacklist)
    "zlib": (
        '#include <zlib.h>\nextern "C" int z(Bytef* d, uLongf* n, const Bytef* s, '
        "uLong* m) { return uncompress2(d, n, s, m); }",
        ["-lz"],
    ),
}


def compile_so(work: Path, name: str, source: str, flags: list[str]) -> Path:
    out = work / f"lib{name}.so"
    (work / f"{name}.cpp").write_text(source)
    subprocess.run(
        ["g++", "-shared", "-fPIC", "-O1", str(work / f"{name}.cpp"), "-o", str(out), *flags],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
@slow("g++ compiles")
def built(tmp_path_factory) -> dict[str, Path]:
    if not shutil.which("g++"):
        pytest.skip("g++ is not on PATH")
    work = tmp_path_factory.mktemp("elf")
    found = {name: compile_so(work, name, source, flags) for name, (source, flags) in SOURCES.items()}
    # A library of our own and one named as torch's, and a module that needs both.
    found["own"] = compile_so(work, "own", 'extern "C" int own() { return 1; }', ["-Wl,-soname,libown.so"])
    found["torchlike"] = compile_so(work, "c10", 'extern "C" int c10() { return 2; }', ["-Wl,-soname,libc10.so"])
    found["user"] = compile_so(
        work,
        "user",
        'extern "C" int own(); extern "C" int c10();\nextern "C" int u() { return own() + c10(); }',
        [f"-L{work}", "-lown", "-lc10"],
    )
    return found


def auditwheel_tag(wheel: Path) -> str:
    """auditwheel's overall verdict, as `auditwheel repair --exclude` would take it (nothing grafted)."""
    info = analyze_wheel_abi(None, None, wheel, frozenset(EXTERNAL), disable_isa_ext_check=False, allow_graft=False)
    return info.overall_policy.name


def wheel_of(path: Path, out: Path, tag: str) -> Path:
    return write_wheel(
        WheelSpec(
            name="probe",
            version="1.0",
            python_tags=("py3",),
            abi_tags=("none",),
            platform_tags=(tag,),
            files={f"probe/{path.name}": path},
        ),
        out,
    )


@pytest.mark.parametrize(
    "name, tag, limiting",
    [
        ("plain", "manylinux_2_5_x86_64", ()),
        ("cxx", "manylinux_2_24_x86_64", ("CXXABI_1.3.9", "GLIBCXX_3.4.21")),
        ("pthread", "manylinux_2_34_x86_64", ("GLIBC_2.34",)),
        ("zlib", "manylinux_2_34_x86_64", ("uncompress2 of libz.so.1",)),
    ],
)
def test_the_tag_is_auditwheels(built, tmp_path, name, tag, limiting):
    verdict = platform_tag([built[name]])
    assert (verdict.tag, verdict.limiting, verdict.machine) == (tag, limiting, "x86_64")
    assert auditwheel_tag(wheel_of(built[name], tmp_path, verdict.tag)) == tag


def test_libraries_external_by_design_are_not_judged_and_unknown_ones_are_refused(built, tmp_path):
    with pytest.raises(FaforgeError, match=re.escape("needs libown.so, which no manylinux policy allows")) as caught:
        platform_tag([built["user"]])
    assert caught.value.exit_code == 1
    verdict = platform_tag([built["user"]], inside=["libown.so"])
    assert (
        verdict.external == ("libc10.so",)
        and verdict.inside == ("libown.so",)
        and verdict.tag == "manylinux_2_5_x86_64"
    )
    assert (
        is_external("libtorch_cuda.so") and is_external("libcudart.so.13") and is_external("libflash_attn_kernels.so.1")
    )
    assert not is_external("libcuda.so.1"), "the driver is the system's, not a wheel's"


@pytest.fixture(scope="module")
def aarch64(tmp_path_factory) -> Path:
    """A C++ library cross-compiled for aarch64 (Debian's g++-aarch64-linux-gnu), as a linux-aarch64 cell's are."""
    if not shutil.which("aarch64-linux-gnu-g++"):
        pytest.skip("aarch64-linux-gnu-g++ is not on PATH (apt-get install g++-aarch64-linux-gnu)")
    work = tmp_path_factory.mktemp("aarch64")
    (work / "a.cpp").write_text(SOURCES["cxx"][0])
    out = work / "liba.so"
    subprocess.run(
        ["aarch64-linux-gnu-g++", "-shared", "-fPIC", "-O1", str(work / "a.cpp"), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    return out


def test_an_aarch64_library_gets_an_aarch64_tag(aarch64, tmp_path):
    verdict = platform_tag([aarch64])
    assert verdict.machine == "aarch64" and verdict.tag == "manylinux_2_24_aarch64", verdict
    assert auditwheel_tag(wheel_of(aarch64, tmp_path, verdict.tag)) == verdict.tag


def test_files_of_two_architectures_are_refused(built, aarch64):
    with pytest.raises(FaforgeError, match="ELF files for aarch64, x86_64 in one wheel"):
        platform_tag([built["plain"], aarch64])


@pytest.mark.parametrize(
    "tag, expected",
    [
        ("manylinux_2_28_x86_64", LinuxPlatform("x86_64", "2.28")),  # PEP 600 spells its floor
        (
            "manylinux2014_aarch64",
            LinuxPlatform("aarch64", "2.17"),
        ),  # a legacy alias: auditwheel's policy names its floor
        ("manylinux1_x86_64", LinuxPlatform("x86_64", "2.5")),
        ("manylinux2010_x86_64", LinuxPlatform("x86_64", "2.12")),
        ("linux_x86_64", LinuxPlatform("x86_64", None)),  # no floor
        ("manylinux1_aarch64", None),  # no policy has that alias
        ("macosx_11_0_arm64", None),
        ("any", None),
    ],
)
def test_a_platform_tag_names_its_machine_and_glibc_floor(tag, expected):
    assert linux_platform(tag) == expected
