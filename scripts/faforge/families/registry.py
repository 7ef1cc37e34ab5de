"""The families faforge builds, in the order every listing, plan and page shows them. Adding a family is a
package beside these and one entry here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from faforge.families.flash_attn import module as flash_attn
from faforge.families.flash_attn_3 import module as flash_attn_3
from faforge.families.flash_attn_4 import module as flash_attn_4

if TYPE_CHECKING:  # the stages' protocols import the stages; at run time each family module loads its own lazily
    from faforge.families.protocol import FamilyModule

FAMILIES: tuple[FamilyModule, ...] = (flash_attn, flash_attn_3, flash_attn_4)
