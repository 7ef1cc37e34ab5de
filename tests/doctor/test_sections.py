"""The sections beside the flash-attn report (faforge.doctor.sections): each family is asked through its `doctor`
namespace, so a next family (a pure-Python one with pinned compiled dependencies) adds its section by being in
the list, and an environment holding only another family's package is not told flash-attn is missing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from faforge.doctor.diagnose import diagnose
from faforge.doctor.examine import Report, situation_from
from faforge.doctor.facts import Distribution, EnvFacts
from faforge.doctor.fixes import plan
from faforge.doctor.sections import beside, family_sections
from faforge.doctor.situation import PACKAGE_MISSING
from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from tests.doctor.test_pip_fixes import facts, pip_index  # noqa: F401 (pip_index: the fixes' index, autouse)

NEXT = "flash-attn-4"  # a pure-Python family: its dependency set pinned per torch x CUDA


@dataclass(frozen=True)
class PinnedSection:
    version: str
    healthy: bool = True

    def to_json(self) -> dict:
        return {"package": NEXT, "version": self.version, "healthy": self.healthy}

    def text_lines(self) -> list[str]:
        return ["", f"{NEXT} {self.version}"]


def examine_next(python: Path, found: EnvFacts, timeout_s: float, progress) -> PinnedSection | None:
    dist = next(iter(found.distributions_of(NEXT)), None)
    return PinnedSection(dist.version) if dist else None


NEXT_FAMILY = SimpleNamespace(doctor=SimpleNamespace(json_key="flash_attn_4", examine=examine_next))


def with_next(f: EnvFacts) -> EnvFacts:
    site = f.site_dirs[0]
    dist = Distribution(NEXT, "4.0.0b1", f"{site}/flash_attn_4-4.0.0b1.dist-info", site, "pip", None)
    return replace(f, distributions=(*f.distributions, dist))


def test_each_family_is_asked_and_only_an_installed_one_gives_a_section():
    f = with_next(facts(flash=None))
    found = family_sections([*FAMILIES, NEXT_FAMILY], Path(f.python.executable), f, 1.0, lambda message: None)
    assert [(key, s.to_json()) for key, s in found] == [
        ("flash_attn_4", {"package": NEXT, "version": "4.0.0b1", "healthy": True})
    ]
    assert family_sections([*FAMILIES, NEXT_FAMILY], Path(f.python.executable), facts(), 1.0, print) == []


def test_beside_another_familys_package_flash_attn_is_not_missing():
    f = facts(flash=None)
    s = situation_from(f)
    problems = diagnose(s)
    matrix = load_matrix()
    fixes = plan(s, problems, matrix, [], pip_builds(matrix, f.system.platform))
    report = Report(s, tuple(problems), tuple(fixes))
    assert PACKAGE_MISSING in {p.kind for p in report.problems}
    assert any(PACKAGE_MISSING in fix.resolves for fix in report.fixes)
    assert beside(report, False) == report
    shown = beside(report, True)
    assert PACKAGE_MISSING not in {p.kind for p in shown.problems}
    assert not any(set(fix.resolves) == {PACKAGE_MISSING} for fix in shown.fixes)
