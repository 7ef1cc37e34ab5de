"""`faforge verify`'s work: each package's gates run and recorded in the manifest, one package after the other.

Every PACKAGE argument is read once; a split flash-attn gets the kernel build it pins (among the
arguments, beside it, or from the kernel channel), and a kernel package's GPU gate runs through the
arguments that pin it. The results of each package go to `done` as soon as they are recorded, so that
a later package's error cannot lose them. A flash-attn built for another machine gets its gates from
faforge.release.verify_foreign (abi natively, import under qemu, gpu on a runner of that machine); a
flash-attn-3, which serves a torch range through the stable ABI, from faforge.families.flash_attn_3.verify.
A wheel (.whl) gets its gates from faforge.release.wheel_gates: a glue wheel with the kernel wheel it pins
(among the arguments or beside it), a kernel wheel's gpu gate through the glue wheels that pin it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from faforge.families.flash_attn_3.verify import is_stable_abi_package, stable_gates
from faforge.release.clean_env import matching_torch_venv
from faforge.release.kernel_package import find_kernel_package, pins_kernel
from faforge.release.manifest import GateResult, record
from faforge.release.package import PackageFacts, read_package
from faforge.release.reporter import Reporter
from faforge.release.verify import Check, abi_gate, gpu_gate, import_gate, torch_gates
from faforge.release.verify_foreign import NOTHING_NAMED, Emulation, foreign_gates, foreign_machine
from faforge.release.verify_kernel import kernel_gate
from faforge.release.wheel_gates import wheel_gates
from faforge.release.wheel_identity import WheelPackage, is_wheel_path, wheel_package
from faforge.release.wheel_pairs import find_kernel_wheel, pins


def run_gates(
    package: PackageFacts,
    gates: tuple[str, ...],
    against: list[Path] | None = None,
    announce: Callable[[str], None] = lambda message: None,
    *,
    kernel: PackageFacts | None = None,
    users: tuple[PackageFacts, ...] = (),
) -> list[Check]:
    """Run `gates` (abi, import, gpu) on one package; gates without a matching torch are skipped.
    `kernel` is the kernel package a split flash-attn pins (found by
    faforge.release.kernel_package.find_kernel_package); for a kernel package, `users` are
    the flash-attn packages of the same call that pin it (its gpu gate runs through them).
    `announce` hears about slow set-up (a torch venv built on first use) before it starts."""
    if package.is_kernel_package:
        return [kernel_gate(gate, package, users, announce) for gate in gates]
    return torch_gates(
        gates,
        against,
        lambda: matching_torch_venv(package, announce),
        abi=lambda libraries: abi_gate(package, libraries, kernel),
        imports=lambda venv: import_gate(package, venv, kernel),
        gpu=lambda venv: gpu_gate(package, venv, kernel),
    )


def verify_packages(
    packages: list[str],
    gates: tuple[str, ...],
    *,
    manifest: Path,
    against: list[Path] | None,
    kernel_channel: str | None,
    report: Reporter,
    emulation: Emulation = NOTHING_NAMED,
    done: Callable[[list[GateResult]], None],
) -> list[GateResult]:
    """The manifest entries of every package's gates, in order."""
    entries = []
    read: dict[str, PackageFacts | WheelPackage] = {}

    def facts(path: str) -> PackageFacts | WheelPackage:
        if path not in read:
            read[path] = wheel_package(path) if is_wheel_path(path) else read_package(path)
        return read[path]

    def given(kind: type) -> list:
        """Every PACKAGE argument of that kind (each read once: a bad one stops the call there)."""
        return [f for f in map(facts, packages) if isinstance(f, kind)]

    for path in packages:
        package = facts(path)
        # Both read every PACKAGE argument when they need the others: a bad
        # one stops the call there, after the results already reported.
        if isinstance(package, WheelPackage):
            kernel_wheel = find_kernel_wheel(package, given(WheelPackage)) if package.kernel_pin else None
            users = (
                tuple(w for w in given(WheelPackage) if pins(w, package))
                if "gpu" in gates and package.kind == "kernel"
                else ()
            )
        else:
            kernel = find_kernel_package(package, given(PackageFacts), kernel_channel) if package.kernel_pin else None
            users = tuple(p for p in given(PackageFacts) if pins_kernel(p, package)) if "gpu" in gates else ()
        checked = []
        with report.step(f"verify {package.filename} ({', '.join(gates)})") as state:
            if isinstance(package, WheelPackage):
                checks = wheel_gates(
                    package, gates, against, kernel=kernel_wheel, users=users, emulation=emulation, announce=report.say
                )
            elif is_stable_abi_package(package):  # one binary for a torch range: its own gates, on any machine
                checks = stable_gates(package, gates, against, emulation, announce=report.say)
            elif machine := foreign_machine(package):
                checks = foreign_gates(package, machine, gates, against, kernel, emulation)
            else:
                checks = run_gates(package, gates, against, announce=report.say, kernel=kernel, users=users)
            for check in checks:
                checked.append(record(manifest, package, check.gate, check.result, check.detail))
                report.say(f"  {check.gate}: {check.result}: {check.detail}")
                state.failed = state.failed or check.result == "failed"
            skipped = [e.gate for e in checked if e.result == "skipped"]
            state.skipped = f"{', '.join(skipped)} not verified" if skipped else None
        entries += checked
        done(checked)
    return entries
