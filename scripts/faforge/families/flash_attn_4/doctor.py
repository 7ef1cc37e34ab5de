"""`faforge doctor` on flash-attn 4 (faforge.doctor.sections.DoctorFamily). STUB."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from faforge.doctor.facts import EnvFacts
from faforge.doctor.sections import DoctorSection
from faforge.family import FLASH_ATTN_4

json_key = FLASH_ATTN_4.key


def examine(python: Path, facts: EnvFacts, timeout_s: float, progress: Callable[[str], None]) -> DoctorSection | None:
    return None
