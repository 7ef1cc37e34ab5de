"""flash-attn 2 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.family import FLASH_ATTN
from faforge.gpu import builtin as gpu  # noqa: F401 (its stage namespace, read by the GPU stage)

spec = FLASH_ATTN
