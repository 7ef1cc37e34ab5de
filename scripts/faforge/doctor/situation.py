"""What doctor's rules judge and what they say: the Situation gathered once, and a Problem.

Apart from the rules so that fixes and the report can use both without importing the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from faforge.abi import classify
from faforge.doctor.binary import BinaryFacts
from faforge.doctor.facts import EnvFacts
from faforge.doctor.installs import Claim, Install
from faforge.family import FLASH_ATTN
from faforge.matrix.kernels import KernelPin, kernel_pin

ERROR, WARNING = "error", "warning"
# The kind of the problem "the family's package or its extension is not there"; rules, fixes and the order use it.
PACKAGE_MISSING = f"{FLASH_ATTN.package}-missing"


@dataclass(frozen=True)
class Problem:
    kind: str
    severity: str
    message: str  # one sentence a user can act on
    details: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Situation:
    """Everything the rules look at, gathered once."""

    facts: EnvFacts
    torch: Install
    flash_attn: Install
    claim: Claim | None
    binary: BinaryFacts | None
    binary_error: str | None  # why the extension file could not be read

    @property
    def torch_version(self) -> str | None:
        return self.facts.torch.version or self.torch.version

    @property
    def torch_words(self) -> str:
        return f"torch {self.torch_version}" if self.torch_version else "torch"

    @property
    def torch_cuda(self) -> str | None:
        return self.facts.torch.cuda or (self.binary.verdict.torch.cuda if self.binary else None)

    @property
    def torch_abi(self) -> int | None:
        rt = self.facts.torch.cxx11_abi
        return rt if rt is not None else (self.binary.verdict.torch.cxx11_abi if self.binary else None)

    @property
    def import_failed(self) -> bool:
        outcome = self.facts.import_outcome
        return not outcome.ok and (self.flash_attn.installed or bool(self.facts.extension_files))

    @property
    def kernel_pin(self) -> KernelPin | None:
        """The exact libflash-attn-kernels build the installed flash-attn's conda record requires."""
        record = self.flash_attn.conda_record
        return kernel_pin(record.depends) if record is not None else None

    def gate_problems(self, *kinds: str) -> list:
        if self.binary is None or not self.import_failed:
            return []
        return [p for p in self.binary.module.problems if p.kind in kinds]

    def misplaced(self) -> list:
        """The gate's missing libraries that are installed where a lexical `..` leads, not where the loader looks."""
        return [p for p in self.gate_problems(classify.MISSING_LIBRARY) if p.misplaced is not None]
