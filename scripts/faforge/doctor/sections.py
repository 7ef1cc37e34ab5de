"""The sections beside the flash-attn report: each family's own diagnosis, asked through its `doctor`
namespace (DoctorFamily), and the other distributions of flash-attn's extension (faforge.doctor.other_builds).

A family whose packages are not flash-attn's glue and kernel library (one built against torch's stable ABI,
a pure-Python one pinning compiled dependencies) says here whether it is installed and what is wrong with
it; the doctor prints its section, adds it to --json under the family's key and counts it in the verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from faforge.doctor.facts import EnvFacts
from faforge.doctor.situation import PACKAGE_MISSING

if TYPE_CHECKING:
    from faforge.doctor.examine import Report


class DoctorSection(Protocol):
    """One family's diagnosis of the environment."""

    @property
    def healthy(self) -> bool: ...

    def to_json(self) -> dict: ...

    def text_lines(self) -> list[str]: ...


class DoctorFamily(Protocol):
    """A family's part of `faforge doctor` (its module's `doctor`)."""

    @property
    def json_key(self) -> str:
        """Its section's key in `faforge doctor --json` (tests/schemas/doctor.json)."""
        ...

    def examine(
        self, python: Path, facts: EnvFacts, timeout_s: float, progress: Callable[[str], None]
    ) -> DoctorSection | None:
        """Its section for `python`, whose flash-attn probe gave `facts`; None where it is not installed there
        (or where the flash-attn report itself is its diagnosis)."""
        ...


class _HasDoctor(Protocol):
    @property
    def doctor(self) -> DoctorFamily: ...


def family_sections(
    families: Iterable[_HasDoctor],
    python: Path,
    facts: EnvFacts,
    timeout_s: float,
    progress: Callable[[str], None],
) -> list[tuple[str, DoctorSection]]:
    """(JSON key, section) of each family installed in `python`, in the families' order."""
    found = []
    for family in families:
        section = family.doctor.examine(python, facts, timeout_s, progress)
        if section is not None:
            found.append((family.doctor.json_key, section))
    return found


def beside(flash_attn_report: Report, others_installed: bool) -> Report:
    """The flash-attn report as the doctor shows it beside other sections: an environment holding another
    family's package or another build of the extension does not lack flash-attn, so neither that problem nor
    a fix for it is shown (before, its exit was 0 while its report said unhealthy and offered flash-attn)."""
    if not others_installed or flash_attn_report.situation.flash_attn.installed:
        return flash_attn_report
    problems = tuple(p for p in flash_attn_report.problems if p.kind != PACKAGE_MISSING)
    fixes = tuple(f for f in flash_attn_report.fixes if set(f.resolves) - {PACKAGE_MISSING})
    return replace(flash_attn_report, problems=problems, fixes=fixes)
