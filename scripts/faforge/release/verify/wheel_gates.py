"""`faforge verify`'s gates of a wheel (the pip world): the gates of the conda packages, on PyPI's torch and real pip.

A family's `wheel_gates` (faforge.release.verify.family) composes these:
  * a glue wheel (flash-attn 2.8.3.post2+torch2.14.cu130.abi1, one CPython tag): its pip cell is the matrix's
    pypi/linux-64/py311/torch2.14/cu130/abi1, which names the exact torch release (2.14.1) and its wheel file;
    its kernel wheel is the exact libflash-attn-kernels== of its Requires-Dist (faforge.release.verify.wheel_pairs).
    - abi: faforge.abi.check_path on the wheel against that torch (the cached base venv of PyPI's torch==2.14.1,
      faforge.release.clean_env; or --against), the kernel wheel's libflash_attn_kernels/ as a library folder,
      its manylinux tag's glibc as the floor;
    - import and gpu: real pip installs it and its kernel wheel beside that torch (faforge.release.verify.wheel_venv).
  * a kernel wheel: its own gates (faforge.release.verify.wheel_kernel_gates).
  * a wheel of a torch range (abi3, Requires-Dist torch>=2.9): its family's abi gate over that range, its import
    and gpu gates as the glue's, beside PyPI's torch of the range's newest minor (torch_gates below).
  * a linux-aarch64 wheel on an x86_64 machine (placed_gates): abi natively against --against (the aarch64 torch)
    with the emulator's sysroot, as verify_foreign does for conda; import under qemu
    (faforge.release.verify.wheel_emulation); gpu skipped (a GPU runner of that machine runs it).
A fact a wheel lacks (no label, no pip cell) makes the gates that need it `skipped` with the reason, never passed.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from pathlib import Path

from faforge.abi.check import PLATFORM_MACHINES, check_path
from faforge.abi.elf_file import ElfError
from faforge.abi.emulator import is_foreign
from faforge.family import FLASH_ATTN
from faforge.pipwheel.layout import KERNEL_DIR
from faforge.release.clean_env import MACHINE_SUBDIRS, TorchVenv
from faforge.release.pip_env import unpacked_wheels
from faforge.release.venv_cache import Unavailable
from faforge.release.verify.family import GateCall
from faforge.release.verify.foreign import Emulation, emulator_for, no_torch_against, target_python
from faforge.release.verify.gates import Check, judge_abi, torch_gates
from faforge.release.verify.wheel_emulation import emulated_wheel_import, gpu_skipped_text
from faforge.release.verify.wheel_identity import WheelPackage
from faforge.release.verify.wheel_venv import cell_venv, pip_gpu_gate, pip_import_gate

# The abi gate of a wheel: (the torch libraries to check against, the target's system library folders) -> verdict.
AbiGate = Callable[[list[Path], Sequence[Path]], Check]


def placed_gates(
    wheel: WheelPackage,
    call: GateCall,
    kernel: WheelPackage | None,
    *,
    abi: AbiGate,
    imports: tuple[str, ...],
    python: str,
    native: Callable[[], list[Check]],
) -> list[Check]:
    """The gates of a wheel that runs beside a torch, where its platform tags place it: none of one Linux machine,
    all `skipped`; another machine's, foreign_gates; this machine's, `native()`. `imports`, `python`: its family's
    (what the import gate imports; the CPython an emulated install resolves for when nothing names one)."""
    machine, gates = PLATFORM_MACHINES.get(wheel.subdir or ""), call.gates
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
        return foreign_gates(
            wheel, machine, gates, call.against, kernel, call.emulation, abi=abi, imports=imports, python=python
        )
    return native()


def glue_gates(
    wheel: WheelPackage,
    gates: tuple[str, ...],
    against: list[Path] | None,
    kernel: WheelPackage | None,
    announce: Callable[[str], None],
    imports: tuple[str, ...],
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
        imports=lambda venv: pip_import_gate(wheel, others, venv, imports),
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


def foreign_gates(
    wheel: WheelPackage,
    machine: str,
    gates: tuple[str, ...],
    against: list[Path] | None,
    kernel: WheelPackage | None,
    emulation: Emulation,
    *,
    abi: AbiGate,
    imports: tuple[str, ...],
    python: str,
) -> list[Check]:
    emulator, why_not = emulator_for(machine, emulation)
    target = target_python(machine, emulation) if "import" in gates else None
    checks = []
    for gate in gates:
        if gate == "abi":
            checks.append(
                abi(against, emulator.library_dirs() if emulator else []) if against else no_torch_against(machine)
            )
        elif gate == "import":
            checks.append(
                emulated_wheel_import(
                    wheel, kernel, against or [], emulator, why_not, target, imports=imports, python_default=python
                )
            )
        elif gate == "gpu":
            checks.append(Check("gpu", "skipped", gpu_skipped_text(wheel, machine)))
    return checks
