"""FlashAttention-3 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.doctor.sections import DoctorFamily
from faforge.families.flash_attn_3 import build as _build
from faforge.families.flash_attn_3 import bump as _bump
from faforge.families.flash_attn_3 import doctor as _doctor
from faforge.families.flash_attn_3 import gpu as _gpu
from faforge.families.flash_attn_3 import matrix as _matrix
from faforge.families.flash_attn_3 import page as _page
from faforge.families.flash_attn_3 import plan as _plan
from faforge.families.flash_attn_3 import verify as _verify
from faforge.family import FLASH_ATTN_3
from faforge.gpu.stage import GpuFamily
from faforge.matrix.stage import MatrixFamily
from faforge.release.build.stage import BuildFamily
from faforge.release.bump.releases import BumpFamily
from faforge.release.page import PageFamily
from faforge.release.plan.stage import PlanFamily
from faforge.release.verify.family import VerifyFamily

spec = FLASH_ATTN_3
# Each stage's namespace typed as that stage's Protocol, so mypy checks the module against it.
matrix: MatrixFamily = _matrix
plan: PlanFamily = _plan
build: BuildFamily = _build
doctor: DoctorFamily = _doctor
page: PageFamily = _page
bump: BumpFamily = _bump
verify: VerifyFamily = _verify
gpu: GpuFamily | None = _gpu
