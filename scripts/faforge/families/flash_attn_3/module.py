"""FlashAttention-3 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.doctor.sections import DoctorFamily
from faforge.families.flash_attn_3 import bump as _bump
from faforge.families.flash_attn_3 import doctor as _doctor
from faforge.families.flash_attn_3 import page as _page
from faforge.family import FLASH_ATTN_3
from faforge.release.bump import BumpFamily
from faforge.release.page import PageFamily

spec = FLASH_ATTN_3
# Each stage's namespace typed as that stage's Protocol, so mypy checks the module against it.
doctor: DoctorFamily = _doctor
page: PageFamily = _page
bump: BumpFamily = _bump
