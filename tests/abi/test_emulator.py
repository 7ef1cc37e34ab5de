"""faforge.abi.emulator: which qemu and sysroot run a foreign interpreter, and what a wrong named one says."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import pytest

from faforge.abi.emulator import Emulator, NoEmulator, find_emulator, is_foreign, machine_of
from faforge.errors import FaforgeError


def _sysroot(tmp_path):
    (tmp_path / "sysroot/lib").mkdir(parents=True)
    (tmp_path / "sysroot/lib/ld-linux-aarch64.so.1").write_text("")
    return tmp_path / "sysroot"


def _qemu(folder, name="qemu-aarch64-static"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_qemu_on_path_and_a_named_sysroot_make_the_wrapper(tmp_path, monkeypatch):
    qemu = _qemu(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    emulator = find_emulator("aarch64", sysroot=str(_sysroot(tmp_path)), environ={})
    assert emulator == Emulator("aarch64", str(qemu), tmp_path / "sysroot")
    assert emulator.command("/p/bin/python") == [str(qemu), "-L", str(tmp_path / "sysroot"), "/p/bin/python"]
    assert emulator.library_dirs() == [tmp_path / "sysroot/lib"]


def test_the_option_wins_over_the_variable_and_both_are_validated(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "")
    named = _qemu(tmp_path / "elsewhere", "my-qemu")
    sysroot = str(_sysroot(tmp_path))
    assert find_emulator("aarch64", None, sysroot, {"FAFORGE_QEMU": str(named)}).qemu == str(named)
    with pytest.raises(FaforgeError, match=r"\$FAFORGE_QEMU '/nope/qemu': not an executable file"):
        find_emulator("aarch64", None, sysroot, {"FAFORGE_QEMU": "/nope/qemu"})
    with pytest.raises(FaforgeError, match=r"--qemu '': not an executable file"):
        find_emulator("aarch64", "", sysroot, {"FAFORGE_QEMU": str(named)})
    with pytest.raises(FaforgeError, match=r"\$FAFORGE_SYSROOT '.*': no lib/ld-linux-aarch64.so.1 in it"):
        find_emulator("aarch64", str(named), None, {"FAFORGE_SYSROOT": str(tmp_path)})


def test_nothing_found_is_a_reason_to_skip_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NoEmulator, match=r"qemu-aarch64 .* is not on PATH.*\$FAFORGE_QEMU \(faforge verify: --qemu\)"):
        find_emulator("aarch64", sysroot=str(_sysroot(tmp_path)), environ={})
    with pytest.raises(NoEmulator, match="no emulation known for riscv64"):
        find_emulator("riscv64", environ={})


def test_the_interpreter_machine_is_read_from_its_elf_header(tmp_path):
    assert machine_of(Path(os.path.realpath(sys.executable))) == platform.machine()
    assert not is_foreign(platform.machine())
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\n")  # a pyenv shim: not ELF, run as it is
    assert machine_of(script) is None and not is_foreign(None)
    assert is_foreign("aarch64" if platform.machine() != "aarch64" else "x86_64")
