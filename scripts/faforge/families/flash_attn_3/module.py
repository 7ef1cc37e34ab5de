"""FlashAttention-3 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.families.flash_attn_3 import build as build
from faforge.families.flash_attn_3 import gpu as gpu
from faforge.families.flash_attn_3 import matrix as matrix
from faforge.families.flash_attn_3 import plan as plan
from faforge.family import FLASH_ATTN_3

spec = FLASH_ATTN_3
