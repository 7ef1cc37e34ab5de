"""flash-attn 2 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.families.flash_attn import build as build
from faforge.families.flash_attn import matrix as matrix
from faforge.families.flash_attn import plan as plan
from faforge.family import FLASH_ATTN
from faforge.gpu import builtin

spec = FLASH_ATTN
# Its GPU suite ships with its recipe, whose test environment has gpu/ but not families/.
gpu = builtin
