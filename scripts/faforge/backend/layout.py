"""The Philox layout: which width of at::PhiloxCudaState's offset_intragraph_ a torch has, and
which one a kernel library was built for.

The field is uint32_t up to torch 2.9 and uint64_t from 2.10 (pytorch/pytorch#164515), which moves
every Flash_fwd_params field after it: the kernel library is built for one layout, and the glue names
its torch's (torch_shim/api/flash_attn_kernels_api.h).
"""

from __future__ import annotations

import re
from pathlib import Path

from faforge.backend.errors import BuildError
from faforge.backend.postlink import dynamic_symbol_names
from faforge.family import FLASH_ATTN

PHILOX_BITS_DEFINE = "FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS"
PHILOX_DEFAULT_BITS = 64
PHILOX_HEADER = "ATen/cuda/detail/PhiloxCudaStateRaw.cuh"
LAYOUT_SYMBOL = re.compile(rf"{FLASH_ATTN.kernel_api_prefix}philox_offset_intragraph_u(32|64)")


def philox_define(philox_bits: int) -> list[str]:
    """The kernel library's define for a layout; the default layout needs none (the shim's default),
    so its objects and cache keys stay as they were."""
    return [] if philox_bits == PHILOX_DEFAULT_BITS else [f"-D{PHILOX_BITS_DEFINE}={philox_bits}"]


def philox_offset_bits(torch_include: str) -> int:
    """The width of this torch's PhiloxCudaState::offset_intragraph_, read from its header (the
    glue's static_assert checks the reading against the real type)."""
    header = Path(torch_include) / PHILOX_HEADER
    try:
        match = re.search(r"\buint(32|64)_t\s+offset_intragraph_\b", header.read_text())
    except OSError as exc:
        raise BuildError(f"cannot read {header} ({exc.strerror}); is this torch's include folder complete?") from None
    if not match:
        raise BuildError(
            f"{header}: no uint32_t/uint64_t offset_intragraph_ member; "
            "this torch's Philox state is new to the build script"
        )
    return int(match.group(1))


def check_kernel_library_layout(library: Path, philox_bits: int, torch_version: str) -> None:
    """Refuse, before compiling, a library of the other layout: its link would fail only on an undefined
    flash_attn_kernels_philox_offset_intragraph_u* after the glue compiled, which names no remedy."""
    built_for = {int(m.group(1)) for name in dynamic_symbol_names(library) if (m := LAYOUT_SYMBOL.fullmatch(name))}
    if len(built_for) != 1:
        raise BuildError(
            f"--kernel-library {library}: defines no "
            f"{FLASH_ATTN.kernel_api_prefix}philox_offset_intragraph_u32/u64 symbol, so it "
            f"is not a {FLASH_ATTN.kernel_library} of this build script; build one with --kernels-only"
        )
    if built_for != {philox_bits}:
        raise BuildError(
            f"--kernel-library {library}: built for the {built_for.pop()}-bit Philox layout, but torch {torch_version} "
            f"has the {philox_bits}-bit one (PhiloxCudaState::offset_intragraph_, "
            "variants/kernel-abi.yaml); use a kernel "
            f"library built with --philox-offset-bits {philox_bits} "
            f"(conda: {FLASH_ATTN.kernel_package} *_philox{philox_bits}_*)"
        )
