"""`faforge doctor` on flash-attn 2: its diagnosis is the doctor's own report (faforge.doctor.examine, the
glue, its kernel library and the torch it was built against), so it adds no section beside it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from faforge.doctor.facts import EnvFacts
from faforge.doctor.sections import DoctorSection
from faforge.family import FLASH_ATTN

json_key = FLASH_ATTN.key  # the report's own section of `faforge doctor --json` (faforge.doctor.report)


def examine(python: Path, facts: EnvFacts, timeout_s: float, progress: Callable[[str], None]) -> DoctorSection | None:
    """No section: the report itself is flash-attn's (faforge.doctor.sections.DoctorFamily)."""
    return None
