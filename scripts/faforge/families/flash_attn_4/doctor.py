"""`faforge doctor` on FlashAttention-4 (flash-attn-4), a pure-Python wheel whose kernels the CuTe DSL compiles at
run time (faforge.doctor.sections.DoctorFamily).

What breaks is not FA4 but the compiled packages it imports, which move under it. So the section reads, in the
target interpreter (faforge.families.flash_attn_4.doctor_facts), the version of every package of the known-good
set of this torch minor and CUDA (variants/flash-attn-4.yaml) and tries the real `import flash_attn.cute`; each
package missing, outside FA4's own requirement or outside the set is named, and so is the import's error. The
heal is the line that installs the set (faforge.families.flash_attn_4.doctor_heal). It also says whether FA4
shares `flash_attn` with flash-attn 2 (FA2 ships flash_attn/__init__.py; FA4 alone is a namespace package).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from faforge.doctor.facts import EnvFacts
from faforge.doctor.fix_commands import Fix
from faforge.doctor.situation import ERROR, WARNING, Problem
from faforge.families.flash_attn_4 import doctor_facts, sets
from faforge.families.flash_attn_4.conda_names import conda_pinned
from faforge.families.flash_attn_4.doctor_facts import Fa4Facts
from faforge.families.flash_attn_4.doctor_heal import heal
from faforge.family import FLASH_ATTN, FLASH_ATTN_4

json_key = FLASH_ATTN_4.key  # the section of `faforge doctor --json` (tests/schemas/doctor.json)
# The compute capabilities FA4 4.0.0b40 runs on, from its wheel's flash_attn/cute/interface.py: `_flash_attn_fwd`
# asserts `arch // 10 in [8, 9, 10, 11, 12]` (line 788), `_flash_attn_bwd` `arch // 10 in [9, 10, 11, 12]` (line
# 2123): forward from Ampere (sm_80) on, backward (training) from Hopper (sm_90: H100) and Blackwell (sm_100,
# sm_103, sm_110, sm_120) only.
FORWARD_MAJORS = (8, 9, 10, 11, 12)
BACKWARD_MAJORS = (9, 10, 11, 12)
FA4_ONLY, BESIDE_FA2 = "FA4 only", "FA2 + FA4"


@dataclass(frozen=True)
class Fa4Report:
    version: str
    layout: str  # FA4_ONLY or BESIDE_FA2
    flash_attn_2: str | None  # flash-attn 2's version where it owns flash_attn/__init__.py
    torch: str | None
    cuda: str | None
    kgs: sets.KnownGoodSet | None
    dependencies: dict[str, tuple[str | None, str]]  # the set's packages: name -> (installed, the set's)
    imported: bool
    import_error: str | None
    problems: tuple[Problem, ...]
    fixes: tuple[Fix, ...]

    @property
    def healthy(self) -> bool:
        return not any(p.severity == ERROR for p in self.problems)

    def to_json(self) -> dict:
        kgs = self.kgs
        return {
            "package": FLASH_ATTN_4.package,
            "version": self.version,
            "layout": self.layout,
            "beside": self.flash_attn_2,  # flash-attn 2's version where it shares the import package
            "torch": self.torch,
            "cuda": self.cuda,
            "known_good_set": None if kgs is None else {"id": kgs.id, "version": kgs.version, "level": kgs.level},
            "dependencies": {n: {"installed": i, "set": s} for n, (i, s) in self.dependencies.items()},
            "import": {"ok": self.imported, "error": self.import_error},
            "healthy": self.healthy,
            "problems": [
                {"kind": p.kind, "severity": p.severity, "message": p.message, "details": list(p.details)}
                for p in self.problems
            ],
            "fixes": [
                {"kind": f.kind, "title": f.title, "commands": list(f.commands), "notes": list(f.notes)}
                for f in self.fixes
            ],
        }

    def text_lines(self) -> list[str]:
        """The FA4 section of the doctor's text report."""
        kgs = f"{self.kgs.id} ({self.kgs.level or 'not yet gated'})" if self.kgs else "none for this torch"
        fa2 = f" ({FLASH_ATTN.package} {self.flash_attn_2})" if self.flash_attn_2 else ""
        lines = [
            "",
            f"{FLASH_ATTN_4.package}: {self.version}, {self.layout}{fa2}",
            f"  torch here: {self.torch or 'not importable'} (CUDA {self.cuda or 'none'}); known-good set: {kgs}",
            f"  `import {FLASH_ATTN_4.module}`: {'ok' if self.imported else self.import_error or 'fails'}",
        ]
        for p in self.problems:
            lines.append(f"  {p.severity}: {p.kind}: {p.message}")
            lines += [f"    {d}" for d in p.details]
        for f in self.fixes:
            lines.append(f"  fix: {f.title}")
            lines += [f"    $ {c}" for c in f.commands] + [f"    ({n})" for n in f.notes]
        lines.append(f"  {FLASH_ATTN_4.package}: {'healthy' if self.healthy else 'problems found'}")
        return lines


def installed(facts: EnvFacts) -> bool:
    """flash-attn-4's .dist-info in a folder on the interpreter's path (the flash-attn probe's facts): the probe of
    its own runs only where there is something to examine."""
    dist = FLASH_ATTN_4.package.replace("-", "_")
    return any(any(Path(d).glob(f"{dist}-*.dist-info")) for d in facts.site_dirs)


def examine(python: Path, facts: EnvFacts, timeout_s: float, progress: Callable[[str], None]) -> Fa4Report | None:
    """The FA4 section (faforge.doctor.sections.DoctorFamily): only where flash-attn-4 is installed."""
    if not installed(facts):
        return None
    data = sets.load()
    names = sorted({n for s in data.sets for n in s.packages} | {FLASH_ATTN_4.package, FLASH_ATTN.package})
    return judge(facts, doctor_facts.collect(python, tuple(names), timeout_s, progress), data)


def torch_minor(version: str | None) -> str | None:
    match = re.match(r"(\d+\.\d+)", version or "")
    return match[1] if match else None


def judge(facts: EnvFacts, fa4: Fa4Facts, data: sets.Fa4Data) -> Fa4Report:
    """The diagnosis from the facts (a pure function: the unit tests feed it facts)."""
    version = fa4.versions.get(FLASH_ATTN_4.package) or "unknown"
    torch, cuda = facts.torch, facts.torch.cuda
    minor = torch_minor(torch.version)
    kgs = data.set_for(minor, cuda) if minor and cuda else None
    problems: list[Problem] = []
    if not torch.imported:
        problems.append(Problem("torch-missing", ERROR, f"`import torch` fails, so {FLASH_ATTN_4.package} cannot load"))
    elif kgs is None:
        have = ", ".join(f"torch {s.torch} with CUDA {s.cuda}" for s in data.sets)
        problems.append(
            Problem(
                "no-known-good-set",
                ERROR,
                f"no known-good set of {FLASH_ATTN_4.package}'s compiled dependencies for torch {torch.version} "
                f"(CUDA {cuda or 'none: a CPU build'}): FA4's compiled stack is gated with {have} only",
                ("the line below installs the newest set with its torch (it replaces this torch)",),
            )
        )
    target = kgs or _newest(data, cuda)
    problems += _release_problems(version, data)
    # In a conda prefix only what the conda package pins is the set's to hold (faforge.families.flash_attn_4
    # .conda_names): conda-forge's nvidia-cutlass-dsl folds PyPI's libs wheels in and chooses cuda-bindings itself.
    held = (lambda name: conda_pinned(name)) if facts.conda is not None else (lambda name: True)
    packages = target.packages.items() if target else ()
    dependencies = {n: (fa4.versions.get(n), v) for n, v in packages if held(n)}
    if kgs is not None:
        problems += _dependency_problems(dependencies, data, _requires(version, data))
    if not fa4.import_outcome.ok:
        problems.append(_import_problem(fa4))
    problems += _gpu_problems(facts)
    errors = tuple(p.kind for p in problems if p.severity == ERROR and p.kind not in ("gpu-arch-unsupported",))
    fixes = (heal(data, target, facts, errors),) if errors and target and torch.imported else ()
    error = fa4.import_outcome.error
    return Fa4Report(
        version,
        BESIDE_FA2 if fa4.init else FA4_ONLY,
        fa4.versions.get(FLASH_ATTN.package) if fa4.init else None,
        torch.version,
        cuda,
        kgs,
        dependencies,
        fa4.import_outcome.ok,
        f"{error.type}: {error.message}" if error else fa4.import_outcome.crashed,
        tuple(problems),
        fixes,
    )


def _newest(data: sets.Fa4Data, cuda: str | None) -> sets.KnownGoodSet | None:
    """The set a torch without one moves to: the newest torch of its CUDA, else the newest at all."""
    ranked = sorted(data.sets, key=lambda s: (s.cuda == cuda, Version(s.torch), Version(s.version)))
    return ranked[-1] if ranked else None


def _requires(version: str, data: sets.Fa4Data) -> dict[str, Requirement]:
    """flash-attn-4 `version`'s own Requires-Dist (its release row) by canonical name."""
    release = next((r for r in data.releases if r.version == version), None)
    found: dict[str, Requirement] = {}
    for line in release.requires if release else ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        found[canonicalize_name(requirement.name)] = requirement
    return found


def _release_problems(version: str, data: sets.Fa4Data) -> list[Problem]:
    served = [r.version for r in data.releases]
    if version in served:
        return []
    return [
        Problem(
            "release-not-gated",
            ERROR,
            f"{FLASH_ATTN_4.package} {version} is not a release with a known-good set (gated: {', '.join(served)})",
        )
    ]


def _dependency_problems(
    dependencies: dict[str, tuple[str | None, str]], data: sets.Fa4Data, requires: dict[str, Requirement]
) -> list[Problem]:
    problems = []
    for name, (have, want) in dependencies.items():
        requirement = requires.get(canonicalize_name(name))
        if have is None:
            problems.append(Problem("dependency-missing", ERROR, f"{name} is not installed (the set has {want})"))
        elif requirement is not None and not requirement.specifier.contains(have, prereleases=True):
            problems.append(
                Problem(
                    "outside-range",
                    ERROR,
                    f"{name} {have} is outside {FLASH_ATTN_4.package}'s requirement {requirement.specifier} "
                    f"and outside the set ({want})",
                )
            )
        elif (Version(have) != Version(want)) if name in data.exact else Version(have) < Version(want):
            problems.append(Problem("outside-set", ERROR, f"{name} {have} is outside the set ({want})"))
    return problems


def _import_problem(fa4: Fa4Facts) -> Problem:
    outcome = fa4.import_outcome
    said = (
        f"{outcome.error.type}: {outcome.error.message}" if outcome.error else f"it did not finish: {outcome.crashed}"
    )
    return Problem(
        "import-failed",
        ERROR,
        f"`import {FLASH_ATTN_4.module}` fails: {said}",
        (f"at {fa4.where}",) if fa4.where else (),
    )


def _gpu_problems(facts: EnvFacts) -> list[Problem]:
    seen = {g.capability or g.name: g for g in (*facts.gpus, *facts.torch.devices)}
    problems = []
    for gpu in seen.values():
        if gpu.capability is None:
            continue
        sm = f"sm_{gpu.capability[0]}{gpu.capability[1]}"
        if gpu.capability[0] not in FORWARD_MAJORS:
            problems.append(
                Problem(
                    "gpu-arch-unsupported",
                    ERROR,
                    f"{FLASH_ATTN_4.package} does not run on your {gpu.name} ({sm}): its forward pass needs compute "
                    "capability 8.x to 12.x, its backward 9.x to 12.x (Hopper sm_90, Blackwell sm_100/sm_103/sm_120)",
                    ("use torch.nn.functional.scaled_dot_product_attention on this GPU",),
                )
            )
        elif gpu.capability[0] not in BACKWARD_MAJORS:
            problems.append(
                Problem(
                    "gpu-forward-only",
                    WARNING,
                    f"on your {gpu.name} ({sm}) {FLASH_ATTN_4.package} runs the forward pass only: its backward "
                    "(training) needs Hopper (sm_90) or Blackwell (sm_100, sm_103, sm_120)",
                    (f"for training on this GPU use {FLASH_ATTN.package} (FlashAttention-2)",),
                )
            )
    if not seen:
        problems.append(
            Problem("no-gpu", WARNING, f"no NVIDIA GPU is visible here; {FLASH_ATTN_4.package} imports but cannot run")
        )
    return problems
