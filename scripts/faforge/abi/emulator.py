"""Running another machine's interpreter here: qemu user-mode emulation (`qemu-aarch64 -L SYSROOT PYTHON`).

`faforge verify` imports a linux-aarch64 package on an x86_64 machine, and `faforge doctor --python`
inspects an aarch64 prefix, through this wrapper; binfmt_misc is not relied on (CI runners and
containers often lack it). qemu is an optional external tool, not from PyPI: --qemu or $FAFORGE_QEMU,
else qemu-<machine> or qemu-<machine>-static on PATH. -L is the folder where the emulated dynamic
loader finds the target's ld.so and libc: --sysroot or $FAFORGE_SYSROOT, else Debian's cross libc
(/usr/<machine>-linux-gnu, libc6-<arch>-cross). A named setting that is wrong is bad input; nothing
found is a reason to skip, never a pass.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from faforge.abi.elf_file import ElfError, ElfFile
from faforge.errors import FaforgeError
from faforge.paths import user_path

# The dynamic loader a sysroot of each machine holds in lib/ (glibc's names).
LOADERS = {"aarch64": "ld-linux-aarch64.so.1", "x86_64": "ld-linux-x86-64.so.2", "ppc64le": "ld64.so.2"}


class NoEmulator(Exception):
    """No qemu or no sysroot for the machine here; the step is skipped with this reason."""


@dataclass(frozen=True)
class Emulator:
    machine: str
    qemu: str
    sysroot: Path

    def command(self, program: str | Path) -> list[str]:
        return [self.qemu, "-L", str(self.sysroot), str(program)]

    def library_dirs(self) -> list[Path]:
        """The target's system libraries (libc, libstdc++), for the ABI gate's symbol lookup."""
        multiarch = f"{self.machine}-linux-gnu"
        candidates = [
            self.sysroot / "lib",
            self.sysroot / "lib" / multiarch,
            self.sysroot / "usr/lib",
            self.sysroot / "usr/lib" / multiarch,
        ]
        return [d for d in candidates if d.is_dir()]


def machine_of(program: Path) -> str | None:
    """The ELF machine of `program` (uname -m's name); None for a script or anything not ELF (a pyenv shim)."""
    try:
        with ElfFile(program) as elf:
            return elf.machine
    except ElfError:
        return None


def is_foreign(machine: str | None) -> TypeGuard[str]:
    return machine is not None and machine != platform.machine()


def find_emulator(
    machine: str, qemu: str | None = None, sysroot: str | None = None, environ: Mapping[str, str] = os.environ
) -> Emulator:
    """qemu and the sysroot for `machine`: FaforgeError for a named one that is wrong, NoEmulator when none is found."""
    if machine not in LOADERS:
        raise NoEmulator(f"no emulation known for {machine} (known: {', '.join(LOADERS)})")
    return Emulator(
        machine,
        _qemu(machine, *_setting(qemu, "--qemu", "FAFORGE_QEMU", environ)),
        _sysroot(machine, *_setting(sysroot, "--sysroot", "FAFORGE_SYSROOT", environ)),
    )


def check_named(qemu: str | None, sysroot: str | None, python: str | None) -> None:
    """--qemu, --sysroot and --target-python as the user named them, checked before any package is read
    (for any machine: which one a package needs is known only later), so a typo is bad input at once
    and never a skip at the end of a long verification."""
    if qemu is not None:
        _named_qemu(qemu, "--qemu", "the target machine")
    if sysroot is not None:
        root = Path(sysroot).expanduser()
        with user_path("--sysroot", root):
            holds_loader = bool(sysroot.strip()) and any(
                (root / "lib" / loader).exists() for loader in LOADERS.values()
            )
        if not holds_loader:
            raise FaforgeError(
                f"--sysroot {sysroot[:200]!r}: no lib/ld-linux loader in it "
                f"({', '.join(LOADERS.values())}), so it is not a sysroot",
                hint="name the folder holding the target's lib/<loader> and "
                "libc, e.g. /usr/aarch64-linux-gnu, or leave it unset",
            )
    if python is not None:
        program = Path(python).expanduser()
        with user_path("--target-python", program):
            is_program = bool(python.strip()) and program.is_file() and machine_of(program) is not None
        if not is_program:
            raise FaforgeError(
                f"--target-python {python[:200]!r}: not an ELF program",
                hint="name the target machine's python of the prefix to "
                "import in, e.g. PREFIX/bin/python3.11, or leave it unset",
            )


def _setting(option: str | None, name: str, variable: str, environ: Mapping[str, str]) -> tuple[str | None, str]:
    if option is not None:
        return option, name
    if variable in environ:
        return environ[variable], f"${variable}"
    return None, ""


def _qemu(machine: str, named: str | None, source: str) -> str:
    if named is None:
        found = shutil.which(f"qemu-{machine}") or shutil.which(f"qemu-{machine}-static")
        if not found:
            raise NoEmulator(
                f"qemu-{machine} (or qemu-{machine}-static) is not on PATH, so no {machine} program can run on this "
                f"{platform.machine()} machine; install qemu-user (apt: qemu-user-static) "
                "or name it with $FAFORGE_QEMU (faforge verify: --qemu)"
            )
        return found
    return _named_qemu(named, source, machine)


def _named_qemu(named: str, source: str, machine: str) -> str:
    try:
        path = shutil.which(named) if named.strip() else None
    except (OSError, ValueError):  # a name too long for the system, or one with a NUL
        path = None
    if not path:
        raise FaforgeError(
            f"{source} {named[:200]!r}: not an executable file or a command on PATH",
            hint=f"name qemu's user-mode emulator for {machine}, e.g. /usr/bin/qemu-aarch64-static, or leave it unset",
        )
    return path


def _sysroot(machine: str, named: str | None, source: str) -> Path:
    loader = LOADERS[machine]
    if named is None:
        default = Path(f"/usr/{machine}-linux-gnu")
        if not (default / "lib" / loader).exists():
            raise NoEmulator(
                f"no {machine} sysroot: {default}/lib/{loader} is missing; install the target's C library "
                f"(apt: libc6-{'arm64' if machine == 'aarch64' else machine}-cross) "
                "or name one with --sysroot / $FAFORGE_SYSROOT"
            )
        return default
    root = Path(named).expanduser()
    with user_path(source, root):
        holds_loader = bool(named.strip()) and (root / "lib" / loader).exists()
    if not holds_loader:
        raise FaforgeError(
            f"{source} {named[:200]!r}: no lib/{loader} in it, so it is not a {machine} sysroot",
            hint=f"name the folder holding the target's lib/{loader} and "
            f"libc, e.g. /usr/{machine}-linux-gnu, or leave it unset",
        )
    return root.resolve()


def interpreter_command(python: Path, environ: Mapping[str, str] = os.environ) -> list[str]:
    """How to run `python` here: itself, or under qemu ($FAFORGE_QEMU, $FAFORGE_SYSROOT or what is found)
    when it is another machine's program; FaforgeError when nothing here can run it."""
    machine = machine_of(python)
    if not is_foreign(machine):
        return [str(python)]
    try:
        return find_emulator(machine, environ=environ).command(python)
    except NoEmulator as exc:
        raise FaforgeError(
            f"{python} is built for {machine} and this machine is {platform.machine()}: {exc}",
            hint=f"or run this on an {machine} machine"
            if machine[0] in "aeiou"
            else f"or run this on a {machine} machine",
        ) from None
