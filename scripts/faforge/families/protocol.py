"""What a family module is: its names (`spec`, from faforge.family) and one namespace per stage it takes part
in, each satisfying the Protocol that stage declares beside its own code. A stage reads only its own
namespace; a family with nothing for a stage gives it an empty contribution, never a branch elsewhere."""

from __future__ import annotations

from typing import Protocol

from faforge.family import Family, StableAbiFamily
from faforge.release.verify_family import VerifyFamily


class FamilyModule(Protocol):
    """A family package's `module` (faforge.families.<name>.module), as cibuildwheel's PlatformModule."""

    @property
    def spec(self) -> Family | StableAbiFamily: ...

    @property
    def verify(self) -> VerifyFamily: ...
