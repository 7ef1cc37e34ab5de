"""`faforge verify`'s work: each package's gates run and recorded in the manifest, one package after the other.

Every PACKAGE argument is read once; a split flash-attn gets the kernel build it pins (among the
arguments, beside it, or from the kernel channel), and a kernel package's GPU gate runs through the
arguments that pin it. The results of each package go to `done` as soon as they are recorded, so that
a later package's error cannot lose them. Each package's and wheel's gates are its family's
(faforge.release.verify.family.VerifyFamily: the family that owns it says which gates it passes and how);
a glue wheel gets the kernel wheel it pins (among the arguments or beside it), a kernel wheel's gpu gate
runs through the glue wheels that pin it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from faforge.release.kernel_package import find_kernel_package, pins_kernel
from faforge.release.manifest import GateResult, record
from faforge.release.package import PackageFacts, read_package
from faforge.release.reporter import Reporter
from faforge.release.verify.family import GateCall, VerifyFamily, package_owner, wheel_kinds, wheel_owner
from faforge.release.verify.foreign import NOTHING_NAMED, Emulation
from faforge.release.verify.wheel_identity import WheelPackage, is_wheel_path, wheel_package
from faforge.release.verify.wheel_pairs import find_kernel_wheel, pins


def verify_packages(
    packages: list[str],
    gates: tuple[str, ...],
    *,
    families: Sequence[VerifyFamily],
    manifest: Path,
    against: list[Path] | None,
    kernel_channel: str | None,
    report: Reporter,
    emulation: Emulation = NOTHING_NAMED,
    done: Callable[[list[GateResult]], None],
) -> list[GateResult]:
    """The manifest entries of every package's gates, in order; `families`' verify namespaces judge them."""
    entries = []
    kinds = wheel_kinds(families)
    call = GateCall(gates, against, emulation, report.say)
    read: dict[str, PackageFacts | WheelPackage] = {}

    def facts(path: str) -> PackageFacts | WheelPackage:
        if path not in read:
            read[path] = wheel_package(path, kinds) if is_wheel_path(path) else read_package(path)
        return read[path]

    def given(kind: type) -> list:
        """Every PACKAGE argument of that kind (each read once: a bad one stops the call there)."""
        return [f for f in map(facts, packages) if isinstance(f, kind)]

    for path in packages:
        package = facts(path)
        # Both read every PACKAGE argument when they need the others: a bad
        # one stops the call there, after the results already reported.
        if isinstance(package, WheelPackage):
            kernel_wheel = find_kernel_wheel(package, given(WheelPackage), kinds) if package.kernel_pin else None
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
                checks = wheel_owner(families, package).wheel_gates(package, call, kernel=kernel_wheel, users=users)
            else:
                checks = package_owner(families, package).package_gates(package, call, kernel=kernel, users=users)
            for check in checks:
                checked.append(record(manifest, package, check.gate, check.result, check.detail))
                report.say(f"  {check.gate}: {check.result}: {check.detail}")
                state.failed = state.failed or check.result == "failed"
            skipped = [e.gate for e in checked if e.result == "skipped"]
            state.skipped = f"{', '.join(skipped)} not verified" if skipped else None
        entries += checked
        done(checked)
    return entries
