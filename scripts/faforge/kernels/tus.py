"""flash-attn 2's kernel translation units, by class (fwd, fwd_split, bwd) and head dim."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN

CLASSES = ("fwd", "fwd_split", "bwd")
KERNEL_DIR = Path(FLASH_ATTN.kernel_source_dir)
_NAME = re.compile(r"flash_(fwd_split|fwd|bwd)_hdim(\d+)_(fp16|bf16)(_causal)?_sm80\.cu")
# flash-attn 2.8.3.post2 sdist, csrc/flash_attn/src/flash_*_sm80.cu: every class has one TU per
# head dim x dtype x causal, 72 in all (tests/kernels/test_tus.py checks a real sdist when present).
HEAD_DIMS = (32, 64, 96, 128, 192, 256)
DTYPES = ("fp16", "bf16")


@dataclass(frozen=True)
class KernelTu:
    name: str
    tu_class: str
    hdim: int
    dtype: str
    causal: bool


def parse_tu(name: str) -> KernelTu:
    match = _NAME.fullmatch(Path(name).name)
    if not match:
        raise FaforgeError(
            f"{name!r} is not a {FLASH_ATTN.package} kernel TU",
            hint="expected a name like flash_fwd_hdim32_fp16_sm80.cu or flash_bwd_hdim128_bf16_causal_sm80.cu",
        )
    tu_class, hdim, dtype, causal = match.groups()
    return KernelTu(name=match.group(0), tu_class=tu_class, hdim=int(hdim), dtype=dtype, causal=bool(causal))


def default_grid() -> list[KernelTu]:
    return [
        parse_tu(f"flash_{c}_hdim{h}_{d}{'_causal' if causal else ''}_sm80.cu")
        for c in CLASSES
        for h in HEAD_DIMS
        for d in DTYPES
        for causal in (False, True)
    ]


def sdist_tus(source_dir: Path) -> list[KernelTu]:
    found = sorted((source_dir / KERNEL_DIR).glob(FLASH_ATTN.kernel_glob))
    if not found:
        raise FaforgeError(
            f"{source_dir}: no {KERNEL_DIR}/{FLASH_ATTN.kernel_glob}",
            hint=f"pass the unpacked {FLASH_ATTN.package} sdist",
        )
    return [parse_tu(p.name) for p in found]


def class_counts(tus: list[KernelTu]) -> dict[str, int]:
    counts = Counter(tu.tu_class for tu in tus)
    return {c: counts.get(c, 0) for c in CLASSES}
