"""What `faforge verify` asks a family (its `verify` namespace, faforge.families.<name>.verify): the packages and
wheels it owns, and the gates each passes and how. The generic gates (faforge.release.verify.gates, verify_kernel,
verify_foreign, wheel_gates, wheel_venv, wheel_emulation) take the family's names, imports, suite and Python as
arguments; a family composes them, or brings its own (a stable-ABI family judges one binary over a torch range).
A pure-Python family owns its one wheel, gates its import in a clean venv and has no abi gate of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from faforge.errors import FaforgeError
from faforge.pipwheel.kinds import WheelKind
from faforge.release.package import PackageFacts
from faforge.release.verify.foreign import Emulation
from faforge.release.verify.gates import Check
from faforge.release.verify.wheel_identity import WheelPackage


@dataclass(frozen=True)
class GateCall:
    """What one `faforge verify` call asks of each of its packages: the gates, the --against torches, the emulation
    named for another machine's packages, and who hears about slow set-up (a torch venv built on first use)."""

    gates: tuple[str, ...]
    against: list[Path] | None
    emulation: Emulation
    announce: Callable[[str], None]


class VerifyFamily(Protocol):
    @property
    def wheels(self) -> tuple[WheelKind, ...]:
        """The kinds of wheel it makes (faforge wheel KIND) and owns under `faforge verify`, by project."""
        ...

    @property
    def gates_help(self) -> str:
        """Its wheels' gates in `faforge verify --help`'s words ("a kernel wheel's torch-free check and ...")."""
        ...

    def owns(self, package: PackageFacts) -> bool:
        """Whether this conda package is one of its outputs."""
        ...

    def package_gates(
        self, package: PackageFacts, call: GateCall, *, kernel: PackageFacts | None, users: tuple[PackageFacts, ...]
    ) -> list[Check]:
        """The call's gates of one of its packages. `kernel`: the kernel package it pins; `users`: the call's
        packages that pin it (a kernel package's gpu gate runs through them)."""
        ...

    def wheel_gates(
        self, wheel: WheelPackage, call: GateCall, *, kernel: WheelPackage | None, users: tuple[WheelPackage, ...]
    ) -> list[Check]:
        """The call's gates of one of its wheels, as package_gates."""
        ...


def wheel_kinds(families: Sequence[VerifyFamily]) -> tuple[WheelKind, ...]:
    return tuple(kind for family in families for kind in family.wheels)


def package_owner(families: Sequence[VerifyFamily], package: PackageFacts) -> VerifyFamily:
    """The family whose output the package is; a package none names is judged as the first family's, whose gates
    read any package's build string (a name is no gate)."""
    return next((f for f in families if f.owns(package)), families[0])


def wheel_owner(families: Sequence[VerifyFamily], wheel: WheelPackage) -> VerifyFamily:
    owner = next((f for f in families if any(k.kind == wheel.kind for k in f.wheels)), None)
    if owner is None:  # wheel_package reads only the kinds of these families
        raise FaforgeError(f"{wheel.filename}: a {wheel.kind} wheel, which no family verifies", input=str(wheel.path))
    return owner
