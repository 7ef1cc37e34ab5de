"""faforge.pipwheel.patch: real patchelf on real binaries sets only the RUNPATH, and the proof that nothing
else changed catches a binary that differs anywhere else."""

from __future__ import annotations

import lzma
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from faforge.abi.elf import read_info
from faforge.abi.elf_file import ElfFile
from faforge.abi.fatbin import read_gpu_archs
from faforge.errors import FaforgeError
from faforge.pipwheel import patch
from faforge.pipwheel.patch import differences, identity, set_runpath
from tests.pipwheel.test_facts import CANARY
from tests.support.tiers import slow


@pytest.fixture(scope="module")
@slow("a g++ compile")
def conda_style(tmp_path_factory) -> Path:
    """A C++ library with a static .symtab and the DT_RPATH rattler-build gives lib/ (`$ORIGIN/`)."""
    if not shutil.which("g++"):
        pytest.skip("g++ is not on PATH")
    work = tmp_path_factory.mktemp("so")
    (work / "k.cpp").write_text(
        '#include <string>\nextern "C" unsigned long k(const char* s) { return std::string(s).size(); }\n'
    )
    out = work / "libk.so.1"
    subprocess.run(
        [
            "g++",
            "-shared",
            "-fPIC",
            "-O1",
            str(work / "k.cpp"),
            "-o",
            str(out),
            "-Wl,-soname,libk.so.1",
            "-Wl,--disable-new-dtags,-rpath,$ORIGIN/",
        ],
        check=True,
        capture_output=True,
    )
    assert read_info(out).rpath == ("$ORIGIN/",) and not read_info(out).runpath
    return out


@pytest.fixture(scope="module")
def aarch64_style(tmp_path_factory) -> Path:
    """The same library for aarch64, linked by Debian's aarch64-linux-gnu-g++ with the backend's glue RUNPATH: aarch64
    GNU ld writes section symbols (STT_SECTION) of .note.gnu.build-id, .gnu.hash and .dynstr into .symtab, and patchelf
    moves those sections (a cross-built glue's `faforge wheel glue` was refused: `.symtab: its bytes changed`)."""
    if not shutil.which("aarch64-linux-gnu-g++"):
        pytest.skip("aarch64-linux-gnu-g++ is not on PATH (Debian g++-aarch64-linux-gnu)")
    work = tmp_path_factory.mktemp("so-aarch64")
    (work / "k.cpp").write_text(
        '#include <string>\nextern "C" unsigned long k(const char* s) { return std::string(s).size(); }\n'
    )
    out = work / "libk.so.1"
    subprocess.run(
        [
            "aarch64-linux-gnu-g++",
            "-shared",
            "-fPIC",
            "-O1",
            str(work / "k.cpp"),
            "-o",
            str(out),
            "-Wl,-soname,libk.so.1",
            "-Wl,-rpath,$ORIGIN/torch/lib",
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def fa3_binary(tmp_path_factory) -> Path:
    """The FA3 canary's real _C.abi3.so (sm_90a, a static .symtab, RUNPATH $ORIGIN/../../..:$ORIGIN/../torch/lib)."""
    work = tmp_path_factory.mktemp("fa3")
    wheel = work / "canary.whl"
    wheel.write_bytes(lzma.decompress(CANARY.read_bytes()))
    with zipfile.ZipFile(wheel) as archive:
        (work / "_C.abi3.so").write_bytes(archive.read("flash_attn_3/_C.abi3.so"))
    return work / "_C.abi3.so"


def test_a_conda_rpath_becomes_the_pip_runpath_and_nothing_else_changes(conda_style, tmp_path):
    lines = []
    after = set_runpath(conda_style, tmp_path / "libk.so.1", ("$ORIGIN/../nvidia/cu13/lib",), say=lines.append)
    info = read_info(tmp_path / "libk.so.1")
    assert info.runpath == ("$ORIGIN/../nvidia/cu13/lib",) and info.rpath == () and info.soname == "libk.so.1"
    assert lines == [f"+ {patch.find_patchelf()} --set-rpath '$ORIGIN/../nvidia/cu13/lib' {tmp_path / 'libk.so.1'}"]
    assert differences(identity(conda_style), after) == []
    assert conda_style.read_bytes() != (tmp_path / "libk.so.1").read_bytes(), "the copy was patched, not the source"


def test_an_aarch64_library_whose_section_symbols_move_is_the_same_binary(aarch64_style, tmp_path):
    runpath = ("$ORIGIN/libflash_attn_kernels", "$ORIGIN/torch/lib", "$ORIGIN/nvidia/cu13/lib")
    after = set_runpath(aarch64_style, tmp_path / "libk.so.1", runpath)
    assert read_info(tmp_path / "libk.so.1").runpath == runpath and after.machine == "aarch64"
    assert differences(identity(aarch64_style), after) == []


def test_the_real_fa3_binary_keeps_its_gpu_code_and_symbols(fa3_binary, tmp_path):
    after = set_runpath(fa3_binary, tmp_path / "_C.abi3.so", ("$ORIGIN/../torch/lib", "$ORIGIN/../nvidia/cu13/lib"))
    assert read_info(tmp_path / "_C.abi3.so").runpath == ("$ORIGIN/../torch/lib", "$ORIGIN/../nvidia/cu13/lib")
    assert after.gpu == read_gpu_archs(fa3_binary) and after.gpu.sass == ("sm_90a",)
    assert {s[0] for s in after.sections} >= {".text", ".nv_fatbin", ".symtab", ".rodata"}


def _flip_a_byte(path: Path, section: str, out: Path) -> Path:
    with ElfFile(path) as elf:
        where = elf.section_by_name(section).offset + 16
    data = bytearray(path.read_bytes())
    data[where] ^= 0xFF
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("section", [".text", ".nv_fatbin", ".rodata"])
def test_a_binary_that_differs_elsewhere_is_caught(fa3_binary, tmp_path, section):
    other = _flip_a_byte(fa3_binary, section, tmp_path / "other.so")
    found = differences(identity(fa3_binary), identity(other))
    assert any(section in line for line in found), found


def test_a_patchelf_that_changes_more_is_refused(conda_style, tmp_path, monkeypatch):
    """A stand-in patchelf that also rewrites code: the result is refused, exit 1, naming what changed."""
    fake = tmp_path / "patchelf"
    real = patch.find_patchelf()
    with ElfFile(conda_style) as elf:
        text = elf.section_by_name(".text").offset
    fake.write_text(
        f'#!/bin/sh\n{real} "$@" && printf \'\\377\' | dd of="$3" bs=1 seek={text + 4} conv=notrunc status=none\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(patch, "find_patchelf", lambda: str(fake))
    with pytest.raises(
        FaforgeError, match=r"changed more than the RUNPATH: section \.text: its bytes changed"
    ) as caught:
        set_runpath(conda_style, tmp_path / "out.so", ("$ORIGIN",))
    assert caught.value.exit_code == 1
