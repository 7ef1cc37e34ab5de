"""Run the whole doctor on one interpreter: collect, read the binary, diagnose, plan fixes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from faforge.doctor import facts as env_facts
from faforge.doctor import index_check, probe_facts
from faforge.doctor.binary import try_read_binary
from faforge.doctor.diagnose import diagnose
from faforge.doctor.fix_commands import Fix
from faforge.doctor.fixes import plan
from faforge.doctor.installs import claim, flash_attn_install, torch_install
from faforge.doctor.offers import offers_from
from faforge.doctor.probe_run import PROBE_TIMEOUT_S, resolve_interpreter
from faforge.doctor.situation import ERROR, Problem, Situation
from faforge.doctor.torch_symbols_file import default_table
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.matrix.render import render_cells


@dataclass(frozen=True)
class Report:
    situation: Situation
    problems: tuple[Problem, ...]
    fixes: tuple[Fix, ...]

    @property
    def healthy(self) -> bool:
        return not any(p.severity == ERROR for p in self.problems)


def situation(
    python: str | None, timeout_s: float = PROBE_TIMEOUT_S, progress: Callable[[str], None] = lambda message: None
) -> Situation:
    return situation_from(probe_facts.collect(resolve_interpreter(python), timeout_s, progress))


def situation_from(facts: env_facts.EnvFacts, *, package: str | None = None) -> Situation:
    """Read the installed binary and the install records behind the probe's facts (of flash-attn, or of
    `package`, another distribution of its extension)."""
    flash = flash_attn_install(facts, *([package] if package else []))
    path = facts.extension or (facts.extension_files[0] if facts.extension_files else None)
    binary, error = try_read_binary(path, facts, default_table())
    return Situation(facts, torch_install(facts), flash, claim(flash), binary, error)


def examine(
    python: str | None,
    timeout_s: float = PROBE_TIMEOUT_S,
    progress: Callable[[str], None] = lambda message: None,
    *,
    offline: bool = False,
) -> Report:
    """The report on `python`; a pip or uv fix's index is read to check it serves the wheel (not `offline`)."""
    s = situation(python, timeout_s, progress)
    problems = diagnose(s)
    fixes: list[Fix] = []
    if any(p.severity == ERROR for p in problems):
        matrix = load_matrix()
        platform = s.facts.system.platform
        if s.facts.conda is None:  # pip or uv installs here: the pip cells' wheels, never a conda line
            builds = pip_builds(matrix, platform or "all")
            fixes = plan(s, problems, matrix, [], builds)
            if any(f.index_url for f in fixes) and not offline:
                progress("checking that the wheel index serves the fix's wheel")
            fixes = list(index_check.checked(fixes, builds, offline=offline))
        else:
            cells = [
                c for c in matrix.cells if platform in (None, c.platform)
            ]  # render only what this machine can install
            fixes = plan(s, problems, matrix, offers_from(render_cells(cells, matrix.recipe_path, matrix.variants_dir)))
    return Report(s, tuple(problems), tuple(fixes))
