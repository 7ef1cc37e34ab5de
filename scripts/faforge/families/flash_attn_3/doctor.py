"""`faforge doctor` on FlashAttention-3 (flash_attn_3), which is built against torch's stable ABI.

A flash-attn-3 binary is not matched to one torch: it claims to load on every torch from 2.9 (its
TORCH_TARGET_VERSION) through torch's stable C functions only. So the doctor reads that claim from the
binary (faforge.abi.stable against this environment's torch), checks the torch is new enough and that
the import works, and checks its GPU code against the GPUs here: FA3's kernels are Hopper's (sm_90a) with
an Ampere fallback (sm_80), so a Blackwell GPU (sm_100, sm_120) gets none, and the doctor says what does.
The same probe as for flash-attn runs, given FA3's names.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.abi.elf_file import ElfError
from faforge.abi.fatbin import GpuArchs, read_gpu_archs
from faforge.abi.stable import StableVerdict, check_stable
from faforge.doctor import facts as env_facts
from faforge.doctor import probe_facts
from faforge.doctor.situation import ERROR, WARNING, Problem
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.gpu import compat
from faforge.versions import vtuple

MIN_TORCH = "2.9"  # TORCH_TARGET_VERSION of hopper/setup.py (variants/matrix.yaml, flash_attn_3.min_torch)
NAMES = (FLASH_ATTN_3.extension, FLASH_ATTN_3.package, "-")  # no kernel package: one binary
json_key = FLASH_ATTN_3.key  # the section of `faforge doctor --json` (tests/schemas/doctor.json)


@dataclass(frozen=True)
class StableAbiReport:
    extension: str
    torch: str | None
    stable_functions: int | None  # how many of torch's stable C functions it imports (None: not read)
    gpu: GpuArchs | None
    problems: tuple[Problem, ...]

    @property
    def healthy(self) -> bool:
        return not any(p.severity == ERROR for p in self.problems)

    def to_json(self) -> dict:
        return {
            "package": FLASH_ATTN_3.package,
            "extension": self.extension,
            "torch": self.torch,
            "stable_functions": self.stable_functions,
            "gpu": {"sass": list(self.gpu.sass), "ptx": list(self.gpu.ptx)} if self.gpu else None,
            "healthy": self.healthy,
            "problems": [
                {"kind": p.kind, "severity": p.severity, "message": p.message, "details": list(p.details)}
                for p in self.problems
            ],
        }

    def text_lines(self) -> list[str]:
        """The FA3 section of the doctor's text report."""
        claim = (
            f"works with torch >= {MIN_TORCH}: imports only torch's stable C functions ({self.stable_functions})"
            if self.stable_functions is not None and not any(p.kind == "not-stable-abi" for p in self.problems)
            else "stable ABI not confirmed"
        )
        gpu = ", ".join([*self.gpu.sass, *self.gpu.ptx]) if self.gpu else "unknown"
        lines = [
            "",
            f"{FLASH_ATTN_3.package}: {self.extension}",
            f"  {claim}; torch here: {self.torch or 'not importable'}; GPU code: {gpu}",
        ]
        for p in self.problems:
            lines.append(f"  {p.severity}: {p.kind}: {p.message}")
            lines += [f"    {d}" for d in p.details]
        lines.append(f"  {FLASH_ATTN_3.package}: {'healthy' if self.healthy else 'problems found'}")
        return lines


def installed(facts: env_facts.EnvFacts) -> bool:
    """Whether flash_attn_3 is on the interpreter's path, from the facts the flash-attn probe already has:
    the second probe (which imports torch again) runs only where there is something to examine."""
    return any((Path(d) / FLASH_ATTN_3.module / "__init__.py").is_file() for d in facts.site_dirs)


def examine(
    python: Path, facts: env_facts.EnvFacts, timeout_s: float, progress: Callable[[str], None]
) -> StableAbiReport | None:
    """The FA3 section (faforge.doctor.sections.DoctorFamily): only where flash_attn_3 is on the path."""
    return examine_stable(python, timeout_s, progress) if installed(facts) else None


def examine_stable(
    python: Path, timeout_s: float, progress: Callable[[str], None] = lambda message: None
) -> StableAbiReport:
    """The FA3 report for `python` (call it where installed() says flash_attn_3 is on its path)."""
    facts = probe_facts.collect(python, timeout_s, progress, names=NAMES)
    if facts.extension is None:  # the package is there (installed() saw it), its extension is not
        return StableAbiReport(
            FLASH_ATTN_3.module,
            facts.torch.version,
            None,
            None,
            (
                Problem(
                    "extension-missing",
                    ERROR,
                    f"{FLASH_ATTN_3.package} is installed but its extension {FLASH_ATTN_3.extension} is not: "
                    "the install is incomplete",
                    (f"reinstall {FLASH_ATTN_3.package}",),
                ),
            ),
        )
    problems = []
    torch = facts.torch
    if not torch.imported:
        problems.append(
            Problem(
                "torch-missing",
                ERROR,
                f"{FLASH_ATTN_3.package} is installed but `import torch` fails, so it cannot load",
                (torch.error.message,) if torch.error else (),
            )
        )
    elif (minor := _minor(torch.version)) is not None and minor < vtuple(MIN_TORCH):
        problems.append(
            Problem(
                "torch-too-old",
                ERROR,
                f"{FLASH_ATTN_3.package} needs torch >= {MIN_TORCH} (its stable C functions), "
                f"and this is torch {torch.version}",
                (f"upgrade torch to {MIN_TORCH} or newer",),
            )
        )
    verdict, archs = _read(Path(facts.extension), facts.torch_package, problems)
    if verdict is not None:
        if verdict.unstable:
            names = ", ".join(u.demangled or u.symbol for u in verdict.unstable[:3])
            problems.append(
                Problem(
                    "not-stable-abi",
                    ERROR,
                    f"this {FLASH_ATTN_3.package} build imports torch's C++ API ({names}), so it is "
                    "tied to the torch it was built against, not 'torch >= 2.9'",
                    (f"install {FLASH_ATTN_3.package} from this project's channel, built against the stable ABI",),
                )
            )
        loads = [p for v in verdict.releases for m in v.modules for p in m.problems]
        problems += [
            Problem(
                "stable-abi-load",
                ERROR,
                f"{FLASH_ATTN_3.extension} does not load against this torch: {p.kind}: "
                f"{p.demangled or p.symbol or ''} {p.detail}".strip(),
            )
            for p in loads[:3]
        ]
    outcome = facts.import_outcome
    if torch.imported and outcome.error is not None:
        problems.append(
            Problem(
                "import-failed",
                ERROR,
                f"`import {FLASH_ATTN_3.extension}` fails: {outcome.error.type}: {outcome.error.message}",
            )
        )
    problems += _gpu_problems(facts, archs)
    return StableAbiReport(
        facts.extension, torch.version, len(verdict.stable_imports) if verdict else None, archs, tuple(problems)
    )


def _minor(version: str | None) -> tuple[int, int] | None:
    """(2, 14) of '2.14.1+cu130'; None for a version the probe reported in another form."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match[1]), int(match[2])) if match else None


def _read(
    extension: Path, torch_package: str | None, problems: list[Problem]
) -> tuple[StableVerdict | None, GpuArchs | None]:
    try:
        archs = read_gpu_archs(extension)
        verdict = check_stable(extension, [Path(torch_package) / "lib"]) if torch_package else None
    except (ElfError, FaforgeError) as exc:
        problems.append(Problem("binary-unreadable", ERROR, f"{extension}: {getattr(exc, 'message', exc)}"))
        return None, None
    return verdict, archs


def _gpu_problems(facts: env_facts.EnvFacts, archs: GpuArchs | None) -> list[Problem]:
    """FA3's GPU code against each GPU here; for one it does not serve, what does."""
    if archs is None:
        return []
    seen = {g.capability or g.name: g for g in (*facts.gpus, *facts.torch.devices)}
    problems = []
    for gpu in seen.values():
        if gpu.capability is None:
            continue
        verdict = compat.check(gpu.capability, archs.sass, archs.ptx)
        if verdict.status == compat.NONE:
            problems.append(
                Problem(
                    "gpu-arch-missing",
                    ERROR,
                    f"{FLASH_ATTN_3.package} has no kernels for your {gpu.name} "
                    f"({verdict.gpu}): FlashAttention-3 serves Hopper "
                    f"(sm_90a: H100, H200, GH200) and, as a fallback, Ampere (sm_80) only",
                    (
                        f"for this GPU use {FLASH_ATTN.package} (FlashAttention-2, "
                        "whose packages carry sm_100 and sm_120 code "
                        "for CUDA >= 12.8) or torch.nn.functional.scaled_dot_product_attention",
                    ),
                    {"gpu": verdict.gpu, "sass": list(archs.sass), "ptx": list(archs.ptx)},
                )
            )
    if not seen:
        problems.append(
            Problem(
                "no-gpu", WARNING, f"no NVIDIA GPU is visible here; {FLASH_ATTN_3.package} can be imported but not run"
            )
        )
    return problems
