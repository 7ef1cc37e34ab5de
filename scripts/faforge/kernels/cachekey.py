"""Names of compiler caches per group of cells whose kernel objects are the same.

`kernel_cache_key` is the key of the builds before the kernel split (the split build): every python variant
of a (platform, torch minor, CUDA, C++ ABI, arch list) compiled byte-identical kernel objects against
torch's headers, and one ccache served them; `faforge bench-build` counts these keys as the "before"
of its kernel-split table. Since the split the kernels compile against the torch shim once per
kernel package (faforge.matrix.kernels), whose slug names CI's compiler cache. `archs_tag` spells an
arch list for both, and `archs_of_tag` reads it back from a kernel package's build string.
"""

from __future__ import annotations

import re
from typing import Protocol

KEY_VERSION = "v1"


class KeyedCell(Protocol):
    """What a key reads of a build cell (faforge.matrix.cells.Cell, a layer above this one)."""

    @property
    def platform(self) -> str: ...
    @property
    def torch(self) -> str: ...
    @property
    def cuda(self) -> str: ...
    @property
    def cxx11_abi(self) -> int: ...
    @property
    def cuda_archs(self) -> str: ...


def archs_tag(cuda_archs: str) -> str:
    """'80;90;100;120+PTX' -> '80_90_100_120ptx' (cache keys allow no ';' or '+')."""
    items = [a for a in re.split(r"[;,\s]+", cuda_archs.strip()) if a]
    return "_".join(a.lower().replace("+", "") for a in items)


def archs_of_tag(tag: str) -> str:
    """'80_90_100_120ptx' -> '80;90;100;120+PTX': the arch list a kernel package's build string names
    (the inverse of archs_tag, for the arch lists it writes: numbers, each optionally with +PTX)."""
    items = tag.split("_")
    if not tag or not all(re.fullmatch(r"\d+[a-f]?(?:ptx)?", item) for item in items):
        raise ValueError(f"arch tag {tag!r} is not archs_tag's spelling of an arch list (e.g. 80_90_120ptx)")
    return ";".join(item.removesuffix("ptx") + ("+PTX" if item.endswith("ptx") else "") for item in items)


def torch_minor(version: str) -> str:
    match = re.match(r"(\d+)\.(\d+)", version)
    if not match:
        raise ValueError(f"torch version {version!r} has no major.minor")
    return f"{match.group(1)}.{match.group(2)}"


def kernel_cache_key(cell: KeyedCell, flash_attn_version: str = "") -> str:
    """e.g. 'ccache-v1-fa2.8.3.post2-linux-64-torch2.7-cu129-abi1-sm80_90_100_120ptx'."""
    parts = ["ccache", KEY_VERSION]
    if flash_attn_version:
        parts.append(f"fa{flash_attn_version}")
    parts += [
        cell.platform,
        f"torch{torch_minor(cell.torch)}",
        f"cu{cell.cuda.replace('.', '')}",
        f"abi{cell.cxx11_abi}",
        f"sm{archs_tag(cell.cuda_archs)}",
    ]
    return "-".join(parts)
