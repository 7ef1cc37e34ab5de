"""GPU arch lists: parsing, what nvcc and the kernels support, and nvcc's -gencode flags.

An arch is (SM number, with PTX); a list of them is what one compile targets. A family whose TUs
target different archs per file (a stable-ABI extension's per-arch instantiations) calls gencode_flags once
per file's list and hands the result to ninja.kernel_ninja's per-file flags.
"""

from __future__ import annotations

import re

from faforge.backend.errors import BuildError
from faforge.family import FLASH_ATTN

Arch = tuple[int, bool]

# Lowest SM flash-attn 2's kernels support (they are sm80 kernels).
FLASH_ATTN_MIN_SM = 80
# nvcc limits: CUDA 13 dropped everything below sm_75; sm_100/sm_120 need 12.8.
NVCC_MIN_SM = [((13, 0), 75), ((12, 0), 50)]
NVCC_MIN_VERSION_FOR_SM = {100: (12, 8), 103: (12, 9), 120: (12, 8), 121: (12, 9)}


def parse_arch_list(spec: str) -> list[Arch]:
    """'80;90;120+PTX' -> [(80, False), (90, False), (120, True)]."""
    archs = []
    for item in re.split(r"[;,\s]+", spec.strip()):
        if not item:
            continue
        match = re.fullmatch(r"(?:sm_)?(\d+)(\+PTX)?", item.replace(".", ""), re.IGNORECASE)
        if not match:
            raise BuildError(f"arch list {spec!r}: {item!r} is not an SM number such as 80, 90 or 120+PTX")
        archs.append((int(match.group(1)), bool(match.group(2))))
    if not archs:
        raise BuildError("arch list is empty: set --archs or FLASH_ATTN_CUDA_ARCHS, e.g. '80;90'")
    return archs


def check_archs_supported(
    archs: list[Arch], nvcc: tuple[int, int], *, min_sm: int = FLASH_ATTN_MIN_SM, family: str = FLASH_ATTN.title
) -> None:
    """Refuse an arch the family's kernels or this nvcc cannot build (`min_sm`, `family`: another family's floor)."""
    nvcc_min_sm = next(sm for version, sm in NVCC_MIN_SM if nvcc >= version)
    for sm, _ in archs:
        if sm < min_sm:
            raise BuildError(f"sm_{sm}: {family} kernels need sm_{min_sm} or newer")
        if sm < nvcc_min_sm:
            raise BuildError(
                f"sm_{sm}: nvcc {nvcc[0]}.{nvcc[1]} cannot target it (lowest is sm_{nvcc_min_sm}); "
                "drop it from the arch list or use an older CUDA"
            )
        needed = NVCC_MIN_VERSION_FOR_SM.get(sm)
        if needed and nvcc < needed:
            raise BuildError(f"sm_{sm} needs nvcc {needed[0]}.{needed[1]} or newer, this one is {nvcc[0]}.{nvcc[1]}")


def gencode_flags(archs: list[Arch]) -> list[str]:
    flags = []
    for sm, ptx in archs:
        flags += ["-gencode", f"arch=compute_{sm},code=sm_{sm}"]
        if ptx:
            flags += ["-gencode", f"arch=compute_{sm},code=compute_{sm}"]
    return flags


def arch_names(archs: list[Arch]) -> list[str]:
    """[(90, False), (120, True)] -> ['sm_90', 'sm_120+PTX'], as the build plan prints them."""
    return [f"sm_{sm}" + ("+PTX" if ptx else "") for sm, ptx in archs]
