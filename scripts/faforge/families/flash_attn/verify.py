"""flash-attn 2's gates under `faforge verify` (faforge.release.verify.family.VerifyFamily): the split build's
packages and wheels, each judged beside the torch of its cell.

  * flash-attn (conda): abi against the cell's torch, import and gpu in a clean env (faforge.release.verify.gates), with
    the kernel package it pins; built for another machine: faforge.release.verify.foreign;
  * libflash-attn-kernels (conda): the torch-free gates (faforge.release.verify.kernel);
  * the glue wheel: faforge.release.verify.wheel_gates beside its pip cell's torch; the kernel wheel: its torch-free
    gates (faforge.release.verify.wheel_kernel_gates).
"""

from __future__ import annotations

from faforge.families.flash_attn.wheel import GLUE_WHEEL, KERNEL_WHEEL
from faforge.family import FLASH_ATTN
from faforge.release.clean_env import matching_torch_venv
from faforge.release.package import PackageFacts
from faforge.release.verify.family import GateCall
from faforge.release.verify.foreign import foreign_gates, foreign_machine
from faforge.release.verify.gates import Check, abi_gate, gpu_gate, import_gate, torch_gates
from faforge.release.verify.kernel import kernel_gate
from faforge.release.verify.wheel_gates import glue_gates, placed_gates, wheel_abi_gate
from faforge.release.verify.wheel_identity import WheelPackage
from faforge.release.verify.wheel_kernel_gates import kernel_wheel_gate

wheels = (KERNEL_WHEEL, GLUE_WHEEL)
gates_help = (
    "a glue wheel's abi against the torch of its pip cell, its import in a clean venv where pip installs it and the "
    "kernel wheel it pins (among the PACKAGE arguments or beside it; nowhere is exit 2) from a loopback index; a "
    "kernel wheel's torch-free check and dlopen beside PyPI's CUDA runtime"
)
# The CPython an emulated install of its wheels resolves for when neither the wheel's tags nor the --against
# torch's site name one.
PYTHON = "3.11"


def owns(package: PackageFacts) -> bool:
    return package.name in (FLASH_ATTN.package, FLASH_ATTN.kernel_package)


def package_gates(
    package: PackageFacts, call: GateCall, *, kernel: PackageFacts | None = None, users: tuple[PackageFacts, ...] = ()
) -> list[Check]:
    """Gates without a matching torch are skipped. `kernel`: the kernel package a split flash-attn pins (found by
    faforge.release.kernel_package.find_kernel_package); for a kernel package, `users`: the flash-attn packages
    of the same call that pin it (its gpu gate runs through them)."""
    gates, against, announce = call.gates, call.against, call.announce
    if package.is_kernel_package:
        return [kernel_gate(gate, package, users, announce) for gate in gates]
    if machine := foreign_machine(package):
        return foreign_gates(package, machine, gates, against, kernel, call.emulation)
    return torch_gates(
        gates,
        against,
        lambda: matching_torch_venv(package, announce),
        abi=lambda libraries: abi_gate(package, libraries, kernel),
        imports=lambda venv: import_gate(package, venv, kernel),
        gpu=lambda venv: gpu_gate(package, venv, kernel),
    )


def wheel_gates(
    wheel: WheelPackage, call: GateCall, *, kernel: WheelPackage | None = None, users: tuple[WheelPackage, ...] = ()
) -> list[Check]:
    """`kernel`: the kernel wheel a glue wheel pins (find_kernel_wheel); `users`: for a kernel wheel, the glue
    wheels of the call that pin it."""
    if wheel.kind == KERNEL_WHEEL.kind:
        return [
            kernel_wheel_gate(
                gate, wheel, users, call.announce, against=call.against or [], emulation=call.emulation, python=PYTHON
            )
            for gate in call.gates
        ]
    return placed_gates(
        wheel,
        call,
        kernel,
        abi=lambda libraries, system_dirs: wheel_abi_gate(wheel, libraries, kernel, system_dirs),
        imports=FLASH_ATTN.imports,
        python=PYTHON,
        native=lambda: glue_gates(wheel, call.gates, call.against, kernel, call.announce, FLASH_ATTN.imports),
    )
