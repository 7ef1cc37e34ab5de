"""What a wheel under `faforge verify` goes with: a glue wheel's kernel wheel, a stable-ABI wheel's torch range.

A glue wheel requires its kernel wheel exactly (libflash-attn-kernels==V of its Requires-Dist, local label
included): it is found among the wheels of the call, else beside the glue. A wheel of a torch range (abi3,
Requires-Dist torch>=2.9) serves the torch minors of the pip cells of its platform and CUDA that its torch
requirement admits.
Apart from the gates because faforge.release.verify.run pairs the call's wheels before any gate runs, and the
native and emulated gates read the same pairs.
"""

from __future__ import annotations

from packaging.specifiers import InvalidSpecifier
from packaging.version import InvalidVersion, Version

from faforge.errors import FaforgeError
from faforge.matrix.cells import PipCell
from faforge.pipwheel.kinds import WheelKind
from faforge.release.verify.wheel_identity import KERNEL, WheelPackage, pip_cells, wheel_package
from faforge.versions import vtuple


def pins(glue: WheelPackage, kernel: WheelPackage) -> bool:
    """Whether the glue wheel requires exactly this kernel wheel (version, local label included) for its machine."""
    if glue.kind != "glue" or kernel.kind != "kernel" or glue.kernel_pin is None or glue.subdir != kernel.subdir:
        return False
    try:
        return Version(glue.kernel_pin) == Version(kernel.facts.version)
    except InvalidVersion:
        return False


def find_kernel_wheel(
    glue: WheelPackage, given: list[WheelPackage], kinds: tuple[WheelKind, ...]
) -> WheelPackage | None:
    """The kernel wheel a glue wheel pins: among `given` (this call's wheels), else beside it (same folder,
    its file name's project and version, read as one of `kinds`). None when it pins none; FaforgeError (exit 2)
    when it is nowhere."""
    pin = glue.kernel_pin
    if pin is None:
        return None
    for other in given:
        if pins(glue, other):
            return other
    stem = f"{KERNEL.replace('-', '_')}-{pin}-"
    for candidate in sorted(glue.path.parent.glob("*.whl")):
        if candidate.name.startswith(stem) and candidate != glue.path:
            found = wheel_package(candidate, kinds)
            if pins(glue, found):
                return found
    raise FaforgeError(
        f"{glue.filename}: needs its kernel wheel {KERNEL}=={pin} ({glue.subdir}), neither among the wheels given "
        "nor beside it",
        input=str(glue.path),
        hint=f"pass it too: faforge verify {glue.path} DIR/{stem}*.whl (the kernel wheel `faforge wheel kernel` wrote, "
        f"its kernel job's artifact); no such file is in {glue.path.parent}",
    )


def torch_range(wheel: WheelPackage) -> list[PipCell]:
    """The newest pip cell of each torch minor a stable-ABI wheel's indexes serve (its platform and CUDA, a torch its
    Requires-Dist admits), oldest minor first; empty when it has no CUDA label or no index takes it."""
    torch = wheel.requires("torch")
    newest: dict[str, PipCell] = {}
    for cell in pip_cells():
        if cell.platform != wheel.subdir or cell.cuda != wheel.cuda:
            continue
        try:
            admitted = torch is None or torch.specifier.contains(Version(cell.torch_minor), prereleases=True)
        except (InvalidVersion, InvalidSpecifier):
            admitted = False
        if admitted and (cell.torch_minor not in newest or vtuple(cell.torch) > vtuple(newest[cell.torch_minor].torch)):
            newest[cell.torch_minor] = cell
    return [newest[m] for m in sorted(newest, key=vtuple)]
