"""FlashAttention-4 behind the stages' protocols (faforge.families.protocol.FamilyModule)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from faforge.families.lazy import stage_loader
from faforge.family import FLASH_ATTN_4

spec = FLASH_ATTN_4

if TYPE_CHECKING:  # each stage's namespace as that stage's Protocol, so mypy checks the module against it
    from faforge.doctor.sections import DoctorFamily
    from faforge.families.flash_attn_4 import build as _build
    from faforge.families.flash_attn_4 import bump as _bump
    from faforge.families.flash_attn_4 import doctor as _doctor
    from faforge.families.flash_attn_4 import gpu as _gpu
    from faforge.families.flash_attn_4 import matrix as _matrix
    from faforge.families.flash_attn_4 import page as _page
    from faforge.families.flash_attn_4 import plan as _plan
    from faforge.families.flash_attn_4 import verify as _verify
    from faforge.gpu.stage import GpuFamily
    from faforge.matrix.stage import MatrixFamily
    from faforge.release.build.stage import BuildFamily
    from faforge.release.bump.releases import BumpFamily
    from faforge.release.page import PageFamily
    from faforge.release.plan.stage import PlanFamily
    from faforge.release.verify.family import VerifyFamily

    matrix: MatrixFamily = _matrix
    plan: PlanFamily = _plan
    build: BuildFamily = _build
    doctor: DoctorFamily = _doctor
    page: PageFamily = _page
    bump: BumpFamily = _bump
    verify: VerifyFamily = _verify
    gpu: GpuFamily | None = _gpu

# At run time each namespace is imported when its stage first asks (faforge.families.lazy).
__getattr__ = stage_loader(
    __name__,
    {
        "matrix": "faforge.families.flash_attn_4.matrix",
        "plan": "faforge.families.flash_attn_4.plan",
        "build": "faforge.families.flash_attn_4.build",
        "doctor": "faforge.families.flash_attn_4.doctor",
        "page": "faforge.families.flash_attn_4.page",
        "bump": "faforge.families.flash_attn_4.bump",
        "verify": "faforge.families.flash_attn_4.verify",
        "gpu": "faforge.families.flash_attn_4.gpu",
    },
)
