"""`faforge verify`'s gates of the FlashAttention-3 wheel (abi3, +cu130.sm90a, Requires-Dist torch>=2.9): the torch
range it serves is that of its indexes (faforge.release.verify.wheel_pairs.torch_range).
  - abi: the stable-ABI check over that range (faforge.families.flash_attn_3.stable_check): --against must hold
    its oldest and newest minor, else `skipped` naming them, as for the conda package;
  - import and gpu: as the glue's, beside PyPI's torch of the range's newest minor, with the FA3 suite;
  - a wheel of another machine: faforge.release.verify.wheel_gates.placed_gates, with this abi gate.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from faforge.families.flash_attn_3.stable_check import FA3_PYTHON, stable_abi_check
from faforge.family import FLASH_ATTN_3
from faforge.matrix.cells import PipCell
from faforge.release.clean_env import BASE_EXTRAS, pypi_torch_venv
from faforge.release.venv_cache import Unavailable
from faforge.release.verify.family import GateCall
from faforge.release.verify.gates import Check
from faforge.release.verify.wheel_gates import placed_gates
from faforge.release.verify.wheel_identity import WheelPackage
from faforge.release.verify.wheel_pairs import torch_range
from faforge.release.verify.wheel_venv import pip_gpu_gate, pip_import_gate

# The GPU suite's arguments for this family (faforge.gpu.run_suite).
SUITE = ("--family", FLASH_ATTN_3.package)


def wheel_gates(
    wheel: WheelPackage, call: GateCall, *, kernel: WheelPackage | None = None, users: tuple[WheelPackage, ...] = ()
) -> list[Check]:
    """Its gates where its platform places it (it pins no kernel wheel and none pins it)."""
    return placed_gates(
        wheel,
        call,
        kernel,
        abi=lambda libraries, system_dirs: range_abi(wheel, torch_range(wheel), libraries),
        imports=FLASH_ATTN_3.imports,
        python=FA3_PYTHON,
        native=lambda: native_gates(wheel, call.gates, call.against or [], call.announce),
    )


def _unserved(wheel: WheelPackage) -> str:
    if wheel.cuda is None:
        return (
            f"{wheel.filename}: its local label {wheel.facts.local!r} names no "
            "CUDA (+cu130.sm80.90a), so no index and no torch range takes it"
        )
    return (
        f"{wheel.filename}: no pip cell of {wheel.subdir} with CUDA {wheel.cuda} has a torch its requirement "
        f"{wheel.requires('torch') or 'torch'} admits, so no index serves it and its torch range is empty"
    )


def range_abi(wheel: WheelPackage, cells: list[PipCell], against: list[Path]) -> Check:
    """The stable-ABI gate of the wheel over the torch minors of `cells` (torch_range's: of its platform and CUDA)."""
    if not cells or wheel.subdir is None or wheel.cuda is None:
        return Check("abi", "skipped", _unserved(wheel))
    return stable_abi_check(
        wheel.path, subdir=wheel.subdir, cuda=wheel.cuda, served=tuple(c.torch_minor for c in cells), against=against
    )


def native_gates(
    wheel: WheelPackage, gates: tuple[str, ...], against: list[Path], announce: Callable[[str], None]
) -> list[Check]:
    cells = torch_range(wheel)
    venv, reason = None, _unserved(wheel) if not cells else ""  # reason: why a gate that needs a torch has none
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
            checks.append(range_abi(wheel, cells, against))
        elif venv is None:
            checks.append(Check(gate, "skipped", reason))
        elif gate == "import":
            checks.append(pip_import_gate(wheel, (), venv, FLASH_ATTN_3.imports))
        elif gate == "gpu":
            checks.append(pip_gpu_gate(wheel, (), venv, SUITE))
    return checks
