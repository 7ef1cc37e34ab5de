"""`faforge verify`'s gates of a wheel (the pip world): the gates of the conda packages, on PyPI's torch and real pip.

Which gate runs how, for each kind of wheel (faforge.release.wheel_identity reads the kind):
  * flash-attn, the glue (2.8.3.post2+torch2.14.cu130.abi1, one CPython tag): its pip cell is the matrix's
    pypi/linux-64/py311/torch2.14/cu130/abi1, which names the exact torch release (2.14.1) and its wheel file;
    its kernel wheel is the exact libflash-attn-kernels== of its Requires-Dist (faforge.release.wheel_pairs).
    - abi: faforge.abi.check_path on the wheel against that torch (the cached base venv of PyPI's torch==2.14.1,
      faforge.release.clean_env; or --against), the kernel wheel's libflash_attn_kernels/ as a library folder,
      its manylinux tag's glibc as the floor;
    - import and gpu: real pip installs it and its kernel wheel beside that torch (faforge.release.wheel_venv).
  * libflash-attn-kernels, the kernel wheel: its own gates (faforge.release.wheel_kernel_gates).
  * flash-attn-3 (abi3, +cu130.sm90a, Requires-Dist torch>=2.9): the torch range it serves is that of its
    indexes (faforge.release.wheel_pairs.fa3_range).
    - abi: the stable-ABI check over that range (faforge.families.flash_attn_3.verify.stable_abi_check): --against
      must hold its oldest and newest minor, else `skipped` naming them, as for the conda FA3;
    - import and gpu: as the glue's, beside PyPI's torch of the range's newest minor, with the FA3 suite.
  * a linux-aarch64 wheel on an x86_64 machine: abi natively against --against (the aarch64 torch) with the
    emulator's sysroot, as verify_foreign does for conda; import under qemu (faforge.release.wheel_emulation);
    gpu skipped (a GPU runner of that machine runs it).
A fact a wheel lacks (no label, no pip cell) makes the gates that need it `skipped` with the reason, never passed.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from pathlib import Path

from faforge.abi.check import PLATFORM_MACHINES, check_path
from faforge.abi.elf_file import ElfError
from faforge.emulator import is_foreign
from faforge.families.flash_attn_3.verify import FA3_PYTHON, stable_abi_check
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.matrix.cells import PipCell
from faforge.pipwheel.layout import KERNEL_DIR
from faforge.release.clean_env import BASE_EXTRAS, MACHINE_SUBDIRS, TorchVenv, pypi_torch_venv
from faforge.release.pip_env import unpacked_wheels
from faforge.release.venv_cache import Unavailable
from faforge.release.verify import Check, judge_abi, torch_gates
from faforge.release.verify_foreign import NOTHING_NAMED, Emulation, emulator_for, no_torch_against, target_python
from faforge.release.wheel_emulation import emulated_wheel_import, gpu_skipped_text
from faforge.release.wheel_identity import WheelPackage
from faforge.release.wheel_kernel_gates import kernel_gate
from faforge.release.wheel_pairs import fa3_range
from faforge.release.wheel_venv import cell_venv, pip_gpu_gate, pip_import_gate


def wheel_gates(
    wheel: WheelPackage,
    gates: tuple[str, ...],
    against: list[Path] | None,
    *,
    kernel: WheelPackage | None = None,
    users: tuple[WheelPackage, ...] = (),
    emulation: Emulation = NOTHING_NAMED,
    announce: Callable[[str], None] = lambda message: None,
) -> list[Check]:
    """Run `gates` on one wheel (see the module's docstring). `kernel`: the kernel wheel a glue wheel pins
    (find_kernel_wheel); `users`: for a kernel wheel, the glue wheels of the call that pin it."""
    if wheel.kind == "kernel":
        return [kernel_gate(gate, wheel, users, announce, against=against or [], emulation=emulation) for gate in gates]
    machine = PLATFORM_MACHINES.get(wheel.subdir or "")
    if machine is None:
        return [
            Check(
                g,
                "skipped",
                f"{wheel.filename}: its platform tags {'.'.join(wheel.facts.platform_tags)} name no one Linux machine "
                f"({', '.join(PLATFORM_MACHINES)}), so no torch can be matched",
            )
            for g in gates
        ]
    if is_foreign(machine):
        return foreign_gates(wheel, machine, gates, against, kernel, emulation)
    if wheel.kind == "fa3":
        return fa3_gates(wheel, gates, against or [], announce)
    return glue_gates(wheel, gates, against, kernel, announce)


def glue_gates(
    wheel: WheelPackage,
    gates: tuple[str, ...],
    against: list[Path] | None,
    kernel: WheelPackage | None,
    announce: Callable[[str], None],
) -> list[Check]:
    def cell_torch() -> TorchVenv:
        if MACHINE_SUBDIRS.get(platform.machine()) != wheel.subdir:
            raise Unavailable(f"a {wheel.subdir} wheel cannot be installed on this {platform.machine()} machine")
        return cell_venv(wheel, announce)

    others = (kernel,) if kernel else ()
    return torch_gates(
        gates,
        against,
        cell_torch,
        abi=lambda libraries: wheel_abi_gate(wheel, libraries, kernel),
        imports=lambda venv: pip_import_gate(wheel, others, venv, FLASH_ATTN.imports),
        gpu=lambda venv: pip_gpu_gate(wheel, others, venv),
    )


def wheel_abi_gate(
    wheel: WheelPackage, against: list[Path], kernel: WheelPackage | None, system_dirs: Sequence[Path] = ()
) -> Check:
    """check_path on the wheel; the kernel library from the kernel
    wheel's folder. An ElfError is the wheel's own content: failed."""
    with unpacked_wheels(*((kernel.facts,) if kernel else ())) as kernel_site:
        try:
            verdict = check_path(
                wheel.path,
                against,
                glibc=wheel.glibc,
                platform=wheel.subdir,
                library_dirs=[*([kernel_site / KERNEL_DIR] if kernel else []), *system_dirs],
            )
        except ElfError as exc:
            return Check("abi", "failed", exc.message)
    floor = f", glibc {wheel.glibc} ({wheel.facts.platform_tags[0]})" if wheel.glibc else ""
    return judge_abi(
        verdict,
        wheel.cxx11_abi,
        kernel=f"{kernel.filename}'s {KERNEL_DIR}/" if kernel else None,
        beside=(f", with {FLASH_ATTN.kernel_soname} from {kernel.filename}" if kernel else "") + floor,
    )


def _fa3_unserved(wheel: WheelPackage) -> str:
    if wheel.cuda is None:
        return (
            f"{wheel.filename}: its local label {wheel.facts.local!r} names no "
            "CUDA (+cu130.sm80.90a), so no index and no torch range takes it"
        )
    return (
        f"{wheel.filename}: no pip cell of {wheel.subdir} with CUDA {wheel.cuda} has a torch its requirement "
        f"{wheel.requires('torch') or 'torch'} admits, so no index serves it and its torch range is empty"
    )


def _fa3_abi(wheel: WheelPackage, cells: list[PipCell], against: list[Path]) -> Check:
    """The stable-ABI gate of an FA3 wheel over the torch minors of `cells` (fa3_range's: of its platform and CUDA)."""
    if not cells or wheel.subdir is None or wheel.cuda is None:
        return Check("abi", "skipped", _fa3_unserved(wheel))
    return stable_abi_check(
        wheel.path, subdir=wheel.subdir, cuda=wheel.cuda, served=tuple(c.torch_minor for c in cells), against=against
    )


def fa3_gates(
    wheel: WheelPackage, gates: tuple[str, ...], against: list[Path], announce: Callable[[str], None]
) -> list[Check]:
    cells = fa3_range(wheel)
    venv, reason = None, _fa3_unserved(wheel) if not cells else ""  # reason: why a gate that needs a torch has none
    if cells and set(gates) & {"import", "gpu"}:
        newest = cells[-1]
        try:
            venv = pypi_torch_venv(f"=={newest.torch}", FA3_PYTHON, BASE_EXTRAS, announce)
            if venv.cuda != wheel.cuda:
                raise Unavailable(
                    f"PyPI's torch {venv.torch} is built for CUDA {venv.cuda}, the wheel for CUDA {wheel.cuda}"
                )
        except Unavailable as exc:
            venv, reason = None, f"no torch {newest.torch} (the newest its indexes serve) here: {exc}"
    checks = []
    for gate in gates:
        if gate == "abi":
            checks.append(_fa3_abi(wheel, cells, against))
        elif venv is None:
            checks.append(Check(gate, "skipped", reason))
        elif gate == "import":
            checks.append(pip_import_gate(wheel, (), venv, FLASH_ATTN_3.imports))
        elif gate == "gpu":
            checks.append(pip_gpu_gate(wheel, (), venv))
    return checks


def foreign_gates(
    wheel: WheelPackage,
    machine: str,
    gates: tuple[str, ...],
    against: list[Path] | None,
    kernel: WheelPackage | None,
    emulation: Emulation,
) -> list[Check]:
    emulator, why_not = emulator_for(machine, emulation)
    python = target_python(machine, emulation) if "import" in gates else None
    checks = []
    for gate in gates:
        if gate == "abi":
            if not against:
                checks.append(no_torch_against(machine))
            elif wheel.kind == "fa3":
                checks.append(_fa3_abi(wheel, fa3_range(wheel), against))
            else:
                checks.append(wheel_abi_gate(wheel, against, kernel, emulator.library_dirs() if emulator else []))
        elif gate == "import":
            checks.append(emulated_wheel_import(wheel, kernel, against or [], emulator, why_not, python))
        elif gate == "gpu":
            checks.append(Check("gpu", "skipped", gpu_skipped_text(wheel, machine)))
    return checks
