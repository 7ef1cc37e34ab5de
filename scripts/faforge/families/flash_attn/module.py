"""flash-attn 2 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.families.flash_attn import verify as verify  # its `faforge verify` and `faforge wheel` hooks
from faforge.family import FLASH_ATTN

spec = FLASH_ATTN
