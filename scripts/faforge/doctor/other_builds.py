"""`faforge doctor` on other builds of flash-attn 2's extension, shipped under other names (vllm-flash-attn,
aphrodite-flash-attn): variants/flash-attn-builds.yaml lists them, read from their real wheels.

Each is flash-attn 2's C++ code, built against one torch and installed as its own distribution, so it breaks
as flash-attn does (`undefined symbol` beside another torch) and the same rules explain it. For each one
installed, the probe runs again with its names (as for a family's own section), and the flash-attn rules judge the
Situation it gives; their words are put in its names. Before, a venv whose `import vllm_flash_attn` died with
`undefined symbol` was told only "flash-attn is not installed".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from faforge import paths
from faforge.datafile import load_yaml
from faforge.doctor import facts as env_facts
from faforge.doctor import probe_facts
from faforge.doctor.diagnose import diagnose
from faforge.doctor.situation import ERROR, Problem
from faforge.errors import DataError
from faforge.family import FLASH_ATTN

DATA_FILE = f"{FLASH_ATTN.package}-builds.yaml"  # variants/, beside the data of the family itself
JSON_KEY = "other_builds"  # the section of `faforge doctor --json` (tests/schemas/doctor.json)
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,99}")


@dataclass(frozen=True)
class OtherBuild:
    """One distribution that ships a flash-attn 2 extension under its own names."""

    distribution: str  # vllm-flash-attn
    module: str  # vllm_flash_attn
    extension: str  # vllm_flash_attn_2_cuda, a top-level module

    def installed(self, facts: env_facts.EnvFacts) -> bool:
        """Its .dist-info or its extension file in a folder on the interpreter's path (the flash-attn probe's facts)."""
        dist = self.distribution.replace("-", "_")
        return any(
            any(Path(d).glob(f"{dist}-*.dist-info")) or any(Path(d).glob(f"{self.extension}*.so"))
            for d in facts.site_dirs
        )

    def words(self, text: str) -> str:
        """flash-attn's names in a rule's words replaced by this build's."""
        text = re.sub(rf"(?<![\w-]){re.escape(FLASH_ATTN.extension)}(?![\w-])", self.extension, text)
        return re.sub(rf"(?<![\w-]){re.escape(FLASH_ATTN.package)}(?![\w-])", self.distribution, text)


def load_builds(path: Path | None = None) -> tuple[OtherBuild, ...]:
    """variants/flash-attn-builds.yaml's rows, each name checked (they go into globs and the probe's argv)."""
    path = path or paths.variants_dir() / DATA_FILE
    data = load_yaml(path)
    rows = data.get("builds") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise DataError(path, "builds", "not a list of builds")
    builds = []
    for i, row in enumerate(rows):
        values = [row.get(k) if isinstance(row, dict) else None for k in ("distribution", "module", "extension")]
        names = [v for v in values if isinstance(v, str) and _NAME.fullmatch(v)]
        if len(names) < len(values):
            raise DataError(path, f"builds[{i}]", "needs distribution, module and extension: lower-case names")
        builds.append(OtherBuild(*names))
    return tuple(builds)


@dataclass(frozen=True)
class OtherBuildReport:
    build: OtherBuild
    version: str | None
    extension: str | None  # the file `import` loads
    problems: tuple[Problem, ...]

    @property
    def healthy(self) -> bool:
        return not any(p.severity == ERROR for p in self.problems)

    def to_json(self) -> dict:
        return {
            "distribution": self.build.distribution,
            "module": self.build.module,
            "extension_module": self.build.extension,
            "version": self.version,
            "extension": self.extension,
            "healthy": self.healthy,
            "problems": [
                {"kind": p.kind, "severity": p.severity, "message": p.message, "details": list(p.details)}
                for p in self.problems
            ],
        }


def examine_other(
    python: Path, build: OtherBuild, timeout_s: float, progress: Callable[[str], None] = lambda message: None
) -> OtherBuildReport:
    """The report on `build` in `python` (call it where build.installed() says it is there)."""
    from faforge.doctor.examine import situation_from  # noqa: PLC0415 (examine loads the planning, not needed here)

    facts = probe_facts.collect(python, timeout_s, progress, names=(build.extension, build.distribution, "-"))
    s = situation_from(facts, package=build.distribution)
    problems = tuple(
        replace(p, message=build.words(p.message), details=tuple(build.words(d) for d in p.details))
        for p in diagnose(s)
    )
    return OtherBuildReport(
        build, s.flash_attn.version, facts.extension or next(iter(facts.extension_files), None), problems
    )


def text_lines(report: OtherBuildReport) -> list[str]:
    b = report.build
    lines = [
        "",
        f"{b.distribution} {report.version or '?'} ({FLASH_ATTN.title}'s "
        f"extension as {b.extension}): {report.extension or 'no extension file'}",
    ]
    for p in report.problems:
        lines.append(f"  {p.severity}: {p.kind}: {p.message}")
        lines += [f"    {d}" for d in p.details]
    lines.append(f"  {b.distribution}: {'healthy' if report.healthy else 'problems found'}")
    return lines
