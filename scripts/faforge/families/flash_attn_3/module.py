"""FlashAttention-3 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.families.flash_attn_3 import verify as verify  # its `faforge verify` and `faforge wheel` hooks
from faforge.family import FLASH_ATTN_3

spec = FLASH_ATTN_3
