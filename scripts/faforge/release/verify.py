"""The gates a package passes before publish: ABI (against the cell's torch libraries), import in a
clean environment, and the GPU suite. Each returns passed, failed or skipped with a reason.

The torch comes from faforge.release.clean_env (the matching PyPI wheel). When no matching torch
exists here every gate that needs one is `skipped`, with the reason, so it can never read as a pass.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.release.clean_env import TorchVenv, Unavailable, fresh_env, matching_torch_venv
from faforge.release.package import PackageFacts

# The modules the recipe's own `python: imports` test imports; torch first, as flash_attn does.
IMPORTS = ("torch", "flash_attn", "flash_attn_2_cuda")
GLIBC_PIN = re.compile(r"^__glibc\s*>=\s*(\d+\.\d+)")
# faforge's own source folder, put on PYTHONPATH of the clean env for the GPU suite runner.
FAFORGE_SOURCE = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Check:
    gate: str
    result: str  # passed | failed | skipped
    detail: str


def glibc_floor(package: PackageFacts) -> str | None:
    return next((m[1] for m in (GLIBC_PIN.match(d) for d in package.depends) if m), None)


def abi_gate(package: PackageFacts, against: list[Path]) -> Check:
    from faforge.abi.check import check_path  # noqa: PLC0415

    verdict = check_path(package.path, against, glibc=glibc_floor(package), platform=package.subdir)
    problems = [f"{m.path}: {p.kind}: {p.detail}" for m in verdict.modules for p in m.problems]
    mislabelled = [m.path for m in verdict.modules if m.declared.cxx11_abi not in (None, package.cxx11_abi)]
    problems += [f"{path}: built with _GLIBCXX_USE_CXX11_ABI={1 - package.cxx11_abi} but labelled cxx11abi{package.cxx11_abi}" for path in mislabelled]
    where = f"torch {verdict.torch.version or '?'} (CUDA {verdict.torch.cuda or 'none'}) in {', '.join(verdict.against)}"
    if problems:
        return Check("abi", "failed", f"{len(problems)} problem(s) against {where}: " + "; ".join(problems[:5]))
    return Check("abi", "passed", f"{len(verdict.modules)} module(s) load against {where}")


def _run_isolated(python: Path, code: str) -> subprocess.CompletedProcess:
    """`python -I`: no PYTHONPATH, no user site, no cwd on sys.path; only the env's site-packages."""
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=600)


def import_gate(package: PackageFacts, venv: TorchVenv) -> Check:
    with fresh_env(package, venv) as python:
        torch_only = _run_isolated(python, "import torch")
        if torch_only.returncode != 0:
            return Check("import", "skipped", f"torch {venv.torch} itself does not import here: {_tail(torch_only)}")
        result = _run_isolated(python, "; ".join(f"import {m}" for m in IMPORTS))
    if result.returncode != 0:
        return Check("import", "failed", f"`import {', '.join(IMPORTS)}` failed in a clean env with PyPI torch {venv.torch}: {_tail(result)}")
    return Check("import", "passed", f"imported {', '.join(IMPORTS[1:])} in a clean env with PyPI torch {venv.torch} (CUDA {venv.cuda})")


def gpu_gate(package: PackageFacts, venv: TorchVenv) -> Check:
    """The GPU suite (faforge.gpu.run_suite) in a clean env: exit 0 passed, 1 failed, 3 skipped."""
    with fresh_env(package, venv) as python:
        env = dict(os.environ, PYTHONPATH=str(FAFORGE_SOURCE))
        result = subprocess.run([str(python), "-m", "faforge.gpu.run_suite", "--json"], capture_output=True, text=True, env=env)
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        return Check("gpu", "failed", f"the GPU suite exited {result.returncode} without a summary: {_tail(result)}")
    status = {0: "passed", 1: "failed", 3: "skipped"}.get(result.returncode, "failed")
    counts = summary.get("counts", {})
    words = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    return Check("gpu", status, f"{words or 'no tests'}" + (f"; {summary['reason']}" if summary.get("reason") else ""))


def _tail(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


def run_gates(package: PackageFacts, gates: tuple[str, ...], against: list[Path] | None = None,
              announce: Callable[[str], None] = lambda message: None) -> list[Check]:
    """Run `gates` (abi, import, gpu) on one package; gates without a matching torch are skipped.
    `announce` hears about slow set-up (a torch venv built on first use) before it starts."""
    venv, reason = None, None
    if set(gates) - ({"abi"} if against else set()):
        try:
            venv = matching_torch_venv(package, announce)
        except Unavailable as exc:
            reason = str(exc)
    checks = []
    for gate in gates:
        if gate == "abi" and (against or venv):
            checks.append(abi_gate(package, against or [venv.torch_lib]))
        elif venv is None:
            checks.append(Check(gate, "skipped", reason))
        elif gate == "import":
            checks.append(import_gate(package, venv))
        elif gate == "gpu":
            checks.append(gpu_gate(package, venv))
    return checks
