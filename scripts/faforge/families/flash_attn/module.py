"""flash-attn 2 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from faforge.doctor.sections import DoctorFamily
from faforge.families.flash_attn import build as _build
from faforge.families.flash_attn import bump as _bump
from faforge.families.flash_attn import doctor as _doctor
from faforge.families.flash_attn import matrix as _matrix
from faforge.families.flash_attn import page as _page
from faforge.families.flash_attn import plan as _plan
from faforge.families.flash_attn import verify as _verify
from faforge.family import FLASH_ATTN
from faforge.gpu import builtin as _gpu
from faforge.gpu.stage import GpuFamily
from faforge.matrix.stage import MatrixFamily
from faforge.release.build.stage import BuildFamily
from faforge.release.bump.releases import BumpFamily
from faforge.release.page import PageFamily
from faforge.release.plan.stage import PlanFamily
from faforge.release.verify.family import VerifyFamily

spec = FLASH_ATTN
# Each stage's namespace typed as that stage's Protocol, so mypy checks the module against it.
matrix: MatrixFamily = _matrix
plan: PlanFamily = _plan
build: BuildFamily = _build
doctor: DoctorFamily = _doctor
page: PageFamily = _page
bump: BumpFamily = _bump
verify: VerifyFamily = _verify
# Its GPU suite ships with its recipe, whose test environment has gpu/ but not families/.
gpu: GpuFamily | None = _gpu
