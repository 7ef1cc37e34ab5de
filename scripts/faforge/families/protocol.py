"""What a family module is: its names (`spec`, from faforge.family) and one namespace per stage it takes part
in, each satisfying the Protocol that stage declares beside its own code. A stage reads only its own
namespace; a family with nothing for a stage gives it an empty contribution, never a branch elsewhere."""

from __future__ import annotations

from typing import Protocol

from faforge.doctor.sections import DoctorFamily
from faforge.family import AnyFamily
from faforge.gpu.stage import GpuFamily
from faforge.matrix.stage import MatrixFamily
from faforge.release.build.stage import BuildFamily
from faforge.release.bump.releases import BumpFamily
from faforge.release.page import PageFamily
from faforge.release.plan.stage import PlanFamily
from faforge.release.verify.family import VerifyFamily


class FamilyModule(Protocol):
    """A family package's `module` (faforge.families.<name>.module), as cibuildwheel's PlatformModule."""

    @property
    def spec(self) -> AnyFamily: ...

    @property
    def matrix(self) -> MatrixFamily: ...

    @property
    def plan(self) -> PlanFamily: ...

    @property
    def build(self) -> BuildFamily: ...

    @property
    def doctor(self) -> DoctorFamily: ...

    @property
    def page(self) -> PageFamily: ...

    @property
    def bump(self) -> BumpFamily: ...

    @property
    def verify(self) -> VerifyFamily: ...

    @property
    def gpu(self) -> GpuFamily | None:
        """Its GPU suite, gate and benchmark entry (faforge.gpu.stage); None: it has no GPU suite."""
