"""flash-attn 4 under `faforge verify` (faforge.release.verify.family.VerifyFamily). STUB."""

from __future__ import annotations

from faforge.pipwheel.kinds import WheelKind
from faforge.release.package import PackageFacts
from faforge.release.verify.family import GateCall
from faforge.release.verify.gates import Check
from faforge.release.verify.wheel_identity import WheelPackage

wheels: tuple[WheelKind, ...] = ()
gates_help = ""


def owns(package: PackageFacts) -> bool:
    return False


def package_gates(
    package: PackageFacts, call: GateCall, *, kernel: PackageFacts | None, users: tuple[PackageFacts, ...]
) -> list[Check]:
    return []


def wheel_gates(
    wheel: WheelPackage, call: GateCall, *, kernel: WheelPackage | None, users: tuple[WheelPackage, ...]
) -> list[Check]:
    return []
