"""FlashAttention-3 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.family import FLASH_ATTN_3

spec = FLASH_ATTN_3
