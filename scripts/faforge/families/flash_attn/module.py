"""flash-attn 2 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.families.flash_attn import matrix as matrix
from faforge.families.flash_attn import plan as plan
from faforge.family import FLASH_ATTN

spec = FLASH_ATTN
