"""FlashAttention-4 under `faforge verify` (faforge.release.verify.family.VerifyFamily): its wheel of one known-good set
(faforge.families.flash_attn_4.wheel), judged by what a pure-Python wheel can break: its metadata and its import.

  - abi: a pure-Python wheel has no binary of its own; what it runs on is the compiled stack its Requires-Dist
    names, so this gate checks that metadata: the label is a set's (cu130.torch2.11), Requires-Dist is exactly
    that torch minor and that set (variants/flash-attn-4.yaml). No machine, torch or network is needed.
  - import: real pip installs the wheel from a loopback index into a clean venv of PyPI's torch of that minor
    (the matrix's newest release of it), the set from PyPI, torch pinned and kept; then `import torch,
    flash_attn.cute`. That runs on a CPU machine without a driver: the CuTe DSL, cuda-bindings and tvm-ffi
    import without libcuda (the DSL picks its highest installed CUDA flavour); only a kernel's first call needs
    the driver and a Hopper or Blackwell GPU (its JIT compile, then "inputs must be on CUDA device" without one).
  - gpu: not run from here (FA4's forward and backward on a GPU belong to the GPU stage): `skipped`, saying so.
The conda package's import gate is the conda world's (a clean conda environment), so no conda package gate here.
"""

from __future__ import annotations

from packaging.requirements import Requirement

from faforge.families.flash_attn_4 import sets
from faforge.families.flash_attn_4.lines import torch_cell
from faforge.families.flash_attn_4.wheel import FA4_WHEEL
from faforge.family import FLASH_ATTN_4
from faforge.release.clean_env import BASE_EXTRAS, pypi_torch_venv
from faforge.release.package import PackageFacts
from faforge.release.venv_cache import Unavailable
from faforge.release.verify.family import GateCall
from faforge.release.verify.gates import Check
from faforge.release.verify.wheel_identity import WheelPackage, pip_cells
from faforge.release.verify.wheel_venv import pip_import_gate
from faforge.wheelnames import torch_requirement

wheels = (FA4_WHEEL,)
gates_help = (
    f"a {FLASH_ATTN_4.package} wheel's metadata (abi: its Requires-Dist is its known-good set) and its import in a "
    "clean venv beside PyPI's torch of its minor, the set from PyPI"
)
# The CPython its import gate runs, where the set names it (else the set's newest).
PYTHON = "3.11"


def owns(package: PackageFacts) -> bool:
    return package.name == FLASH_ATTN_4.package


def package_gates(
    package: PackageFacts, call: GateCall, *, kernel: PackageFacts | None, users: tuple[PackageFacts, ...]
) -> list[Check]:
    why = "the conda package's import in a clean conda environment is the conda world's test, not verify's"
    return [Check(gate, "skipped", why) for gate in call.gates]


def set_of(wheel: WheelPackage, data: sets.Fa4Data) -> tuple[sets.KnownGoodSet | None, str]:
    """The known-good set the wheel's version names (4.0.0b40+cu130.torch2.11), or None and why not."""
    version, _, label = wheel.facts.version.partition("+")
    found = next((s for s in data.sets if s.version == version and s.local_label == label), None)
    if found is None:
        return None, (
            f"{wheel.filename}: its version {wheel.facts.version} names no known-good set of {data.path.name} "
            f"(theirs: {', '.join(f'{s.version}+{s.local_label}' for s in data.sets)})"
        )
    return found, ""


def metadata_gate(wheel: WheelPackage, data: sets.Fa4Data) -> Check:
    known, why = set_of(wheel, data)
    if known is None:
        return Check("abi", "failed", why)
    expected = {str(Requirement(r)) for r in (torch_requirement(known.torch), *data.requirements(known))}
    found = {str(Requirement(r)) for r in wheel.facts.requires_dist}
    if found != expected:
        return Check(
            "abi",
            "failed",
            f"{wheel.filename}: its Requires-Dist is not the set {known.id}: missing {sorted(expected - found)}, "
            f"unexpected {sorted(found - expected)}",
        )
    return Check(
        "abi",
        "passed",
        f"pure Python: its Requires-Dist is exactly torch {known.torch} and the known-good set {known.id} "
        f"({len(known.packages)} packages)",
    )


def import_gate(wheel: WheelPackage, known: sets.KnownGoodSet, call: GateCall) -> Check:
    cell = torch_cell(pip_cells(), known)
    if cell is None:
        return Check("import", "skipped", f"no linux-64 pip cell of torch {known.torch} and CUDA {known.cuda}")
    python = PYTHON if PYTHON in known.python else known.python[-1]
    try:
        venv = pypi_torch_venv(f"=={cell.torch}", python, BASE_EXTRAS, call.announce)
    except Unavailable as exc:
        return Check("import", "skipped", f"no PyPI torch {cell.torch} for Python {python} here: {exc}")
    return pip_import_gate(wheel, (), venv, FLASH_ATTN_4.imports)


def wheel_gates(
    wheel: WheelPackage, call: GateCall, *, kernel: WheelPackage | None, users: tuple[WheelPackage, ...]
) -> list[Check]:
    data = sets.load()
    known, why = set_of(wheel, data)
    checks = []
    for gate in call.gates:
        if gate == "abi":
            checks.append(metadata_gate(wheel, data))
        elif known is None:
            checks.append(Check(gate, "skipped", why))
        elif gate == "import":
            checks.append(import_gate(wheel, known, call))
        else:
            checks.append(
                Check(gate, "skipped", "FA4 on a GPU is the GPU stage's run (faforge test-gpu), not verify's")
            )
    return checks
