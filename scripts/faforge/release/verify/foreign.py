"""The gates of a package built for another machine (linux-aarch64 on an x86_64 runner).

* abi: natively, as for any package (check-abi reads any ELF machine), against --against (the
  target's torch: PyPI's aarch64 wheel installed with `pip install --target --platform`, or an
  aarch64 prefix); the target's libc and libstdc++ come from the emulator's sysroot when one is found;
* import: the package (and the kernel build it pins) extracted into a temporary prefix and imported
  by the target's Python under qemu (faforge.abi.emulator), with the --against torch (else its own) on its path. The
  Python is --target-python or $FAFORGE_TARGET_PYTHON (a conda aarch64 prefix's bin/python, or a
  plain one). `skipped` with the reason when qemu, the sysroot, that Python or the torch is missing;
  its detail says it ran emulated;
* gpu: `skipped`; a GPU runner of the package's machine runs it natively.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.check import PLATFORM_MACHINES
from faforge.abi.emulator import Emulator, NoEmulator, find_emulator, is_foreign, machine_of
from faforge.abi.resolve import torch_lib_dirs
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.gpu.stage import not_run_here
from faforge.paths import user_path
from faforge.release.clean_env import unpacked
from faforge.release.package import PackageFacts
from faforge.release.verify.gates import Check, abi_gate

# Emulated, `import torch` alone took 43 s on a free core (an aarch64 import gate, measured); a loaded runner is slower.
EMULATED_TIMEOUT_S = 1800
TORCH_IMPORTED = "@@faforge-torch-imported@@"
# torch/_C.cpython-311-x86_64-linux-gnu.so: the CPython a torch site-packages was installed for.
TORCH_PYTHON = re.compile(r"_C\.cpython-3(\d+)")


def import_code(imports: tuple[str, ...]) -> str:
    """Run by the target's python -I: the prefix's site-packages and the torch's first, then the family's imports."""
    return (
        "import sys; sys.path[:0] = sys.argv[1:]; import torch; "
        f"print({TORCH_IMPORTED!r}, torch.__version__, flush=True); " + "; ".join(f"import {m}" for m in imports[1:])
    )


@dataclass(frozen=True)
class Emulation:
    """What the user named for running a foreign package: --qemu, --sysroot, --target-python (None: look)."""

    qemu: str | None = None
    sysroot: str | None = None
    python: str | None = None


NOTHING_NAMED = Emulation()  # each of qemu, sysroot and python looked for


def emulator_for(machine: str, emulation: Emulation) -> tuple[Emulator | None, str | None]:
    try:
        return find_emulator(machine, emulation.qemu, emulation.sysroot), None
    except NoEmulator as exc:
        return None, str(exc)


def target_python(machine: str, emulation: Emulation) -> Path | None:
    """--target-python, else $FAFORGE_TARGET_PYTHON; FaforgeError when it is not a `machine` program."""
    named, source = (
        (emulation.python, "--target-python")
        if emulation.python is not None
        else (os.environ.get("FAFORGE_TARGET_PYTHON"), "$FAFORGE_TARGET_PYTHON")
    )
    if named is None:
        return None
    path = Path(named).expanduser()
    with user_path(source, path):
        found = machine_of(path) if path.is_file() else None
    if found != machine:
        what = (
            "no such file" if not path.is_file() else f"an ELF program for {found}" if found else "not an ELF program"
        )
        raise FaforgeError(
            f"{source} {named[:200]!r}: {what}, not a Python interpreter for {machine}",
            hint=f"name the {machine} python of the prefix to import in, e.g. PREFIX/bin/python3.11, or leave it unset",
        )
    return path


def torch_site(against: list[Path]) -> Path | None:
    """The site-packages holding the --against torch (its torch/lib's grandparent)."""
    for folder in against:
        for lib in torch_lib_dirs(folder):
            if lib.name == "lib" and lib.parent.name == "torch":
                return lib.parent.parent
    return None


def torch_sites(against: Sequence[Path]) -> list[Path]:
    """The --against torches that are site-packages (importable), in the order given."""
    return list(dict.fromkeys(site for folder in against if (site := torch_site([folder])) is not None))


def torch_python(site: Path) -> str | None:
    """'3.11' for a site-packages whose torch/_C is cpython-311."""
    found = next((m for p in (site / "torch").glob("_C.cpython-3*.so") if (m := TORCH_PYTHON.search(p.name))), None)
    return f"3.{found.group(1)}" if found else None


def emulated_import_gate(
    package: PackageFacts,
    against: list[Path] | None,
    kernel: PackageFacts | None,
    emulator: Emulator | None,
    why_not: str | None,
    python: Path | None,
    imports: tuple[str, ...] = FLASH_ATTN.imports,
) -> Check:
    machine = emulator.machine if emulator else package.subdir
    if emulator is None:
        return Check("import", "skipped", f"not run: {why_not}")
    if python is None:
        return no_target_python(machine, "a conda linux-aarch64 prefix's bin/python, or a plain prefix's")
    site = torch_site(against or [])  # None: the Python's own torch (a conda aarch64 prefix's)

    def how(seconds: float) -> str:
        return (
            f"emulated: {Path(emulator.qemu).name} -L {emulator.sysroot} {python}, "
            f"{seconds:.0f} s, torch from {site or 'its own site-packages'}"
        )

    return import_in_prefix(
        (package, kernel) if kernel else (package,), [*emulator.command(python)], site, imports, how, machine
    )


def import_in_prefix(
    packages: tuple[PackageFacts, ...],
    python: list[str],
    site: Path | None,
    imports: tuple[str, ...],
    how: Callable[[float], str],
    machine: str,
) -> Check:
    """`python -I` imports `imports` from `packages` extracted into a fresh prefix, with the torch of `site`
    (None: the Python's own) behind them. `how(seconds)` says how it ran."""
    with unpacked(*packages) as prefix:
        own = sorted(str(p) for p in [*prefix.glob("lib/python3*/site-packages"), *prefix.glob("site-packages")])
        return import_from(own, python, site, imports, how, machine, cwd=prefix)


def import_from(
    folders: list[str],
    python: list[str],
    site: Path | None,
    imports: tuple[str, ...],
    how: Callable[[float], str],
    machine: str,
    *,
    cwd: Path,
) -> Check:
    """`python -I` imports `imports` with `folders` first on its path, then the torch of `site` (None: the
    Python's own); run in `cwd`. A pip --target folder of wheels
    is imported this way too (faforge.release.verify.wheel_emulation)."""
    command = [*python, "-I", "-c", import_code(imports), *folders, *([str(site)] if site else [])]
    started = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=EMULATED_TIMEOUT_S, cwd=cwd)
    except subprocess.TimeoutExpired:
        return Check(
            "import", "failed", f"the import did not finish in {EMULATED_TIMEOUT_S} s ({' '.join(command[:3])})"
        )
    ran = how(time.monotonic() - started)
    torch_line = next((line.split()[1] for line in result.stdout.splitlines() if line.startswith(TORCH_IMPORTED)), None)
    tail = ((result.stderr or result.stdout).strip().splitlines() or [f"exit {result.returncode}"])[-1]
    if torch_line is None:
        return Check(
            "import",
            "skipped",
            f"the {machine} torch itself does not import ({ran}): {tail}; pass --against the "
            "site-packages of one (pip install --target DIR --only-binary=:all: "
            "torch==VERSION, with --platform for another machine)",
        )
    if result.returncode != 0:
        return Check("import", "failed", f"`import {', '.join(imports)}` failed ({ran}): {tail}")
    return Check("import", "passed", f"imported {', '.join(imports[1:])} with torch {torch_line} on {machine} ({ran})")


def no_target_python(machine: str, which: str) -> Check:
    """The import gate skipped for want of the target's Python: which to name, and how."""
    return Check(
        "import",
        "skipped",
        f"not run: no {machine} Python to import with; name one with --target-python or "
        f"$FAFORGE_TARGET_PYTHON ({which})",
    )


def no_torch_against(machine: str) -> Check:
    """The abi gate of another machine's package or wheel when no --against names a torch of that machine."""
    return Check(
        "abi",
        "skipped",
        f"no {machine} torch to check against here; pass --against its torch/lib, "
        "site-packages or prefix (the abi gate itself runs on any machine)",
    )


def gpu_skipped(package: PackageFacts, machine: str) -> Check:
    runner = "; CI: gpu-test where FAFORGE_GPU_RUNNER_AARCH64 is true"
    return Check("gpu", "skipped", not_run_here("package", package.subdir, machine, runner))


def foreign_machine(package: PackageFacts) -> str | None:
    """The machine of a flash-attn package built for another machine than this one; None otherwise
    (a kernel package's gates already judge its platform: faforge.release.verify.gates)."""
    machine = PLATFORM_MACHINES.get(package.subdir)
    return machine if not package.is_kernel_package and is_foreign(machine) else None


def foreign_gates(
    package: PackageFacts,
    machine: str,
    gates: tuple[str, ...],
    against: list[Path] | None,
    kernel: PackageFacts | None,
    emulation: Emulation,
) -> list[Check]:
    emulator, why_not = emulator_for(machine, emulation)
    python = target_python(machine, emulation) if "import" in gates else None
    checks = []
    for gate in gates:
        if gate == "abi":
            checks.append(
                abi_gate(package, against, kernel, emulator.library_dirs() if emulator else [])
                if against
                else no_torch_against(machine)
            )
        elif gate == "import":
            checks.append(emulated_import_gate(package, against, kernel, emulator, why_not, python))
        elif gate == "gpu":
            checks.append(gpu_skipped(package, machine))
    return checks
