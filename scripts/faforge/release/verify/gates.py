"""The gates a package passes before publish. Each returns passed, failed or skipped with a reason.

A flash-attn package: ABI (against the cell's torch libraries), import in a clean environment, and
the GPU suite. The torch comes from faforge.release.clean_env (the matching PyPI wheel). When no
matching torch exists here every gate that needs one is `skipped`, with the reason, so it can never
read as a pass. A split flash-attn (the split build) pins one kernel build (`libflash-attn-kernels ==V BUILD`);
its gates run with that kernel package installed beside it: the ABI gate resolves the glue's
libflash_attn_kernels.so from the kernel package's lib/, and the clean env holds both packages.
The gates of the kernel package itself are faforge.release.verify.kernel's; which gates a package gets is its
family's (faforge.release.verify.family).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from faforge.abi.check import check_path
from faforge.abi.elf_file import ElfError
from faforge.abi.report import Verdict
from faforge.family import FLASH_ATTN
from faforge.matrix.kernels import KERNEL_LIBRARY
from faforge.release.clean_env import TorchVenv, fresh_env, unpacked
from faforge.release.package import PackageFacts
from faforge.release.venv_cache import Unavailable

# The modules the recipe's own `python: imports` test imports; torch first, as the family's module does.
IMPORTS = FLASH_ATTN.imports
GLIBC_PIN = re.compile(r"^__glibc\s*>=\s*(\d+\.\d+)")
# faforge's own source folder, put on PYTHONPATH of the clean env for the GPU suite runner.
FAFORGE_SOURCE = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Check:
    gate: str
    result: str  # passed | failed | skipped
    detail: str


def glibc_floor(package: PackageFacts) -> str | None:
    return next((m[1] for m in (GLIBC_PIN.match(d) for d in package.depends) if m), None)


def abi_gate(
    package: PackageFacts, against: list[Path], kernel: PackageFacts | None = None, system_dirs: Sequence[Path] = ()
) -> Check:
    """An ElfError here is about the package's own content (no extension module in it, a broken
    .so): the gate failed (exit 1), it is not bad input. The torch's own problems are FaforgeErrors.
    `system_dirs`: a foreign package's libc and libstdc++ (its sysroot), which this machine's are not."""
    with unpacked(*(kernel,) if kernel else ()) as kernel_prefix:
        try:
            verdict = check_path(
                package.path,
                against,
                glibc=glibc_floor(package),
                platform=package.subdir,
                library_dirs=[*([kernel_prefix / "lib"] if kernel else []), *system_dirs],
            )
        except ElfError as exc:
            return Check("abi", "failed", exc.message)
    return judge_abi(
        verdict,
        package.cxx11_abi,
        kernel=f"{kernel.filename}'s lib/" if kernel else None,
        beside=f", with {KERNEL_LIBRARY} from {kernel.filename}" if kernel else "",
    )


def judge_abi(verdict: Verdict, cxx11_abi: int | None, *, kernel: str | None, beside: str) -> Check:
    """The abi gate's verdict from check_path's: every problem, a module built with the other C++ ABI than
    `cxx11_abi` (its label's), and a library found nowhere. `kernel`: where the kernel library was looked
    for (None: no kernel build was given); `beside` ends the sentence saying what the check ran against."""
    problems = [
        f"{m.path}: {p.kind}: " + (f"{p.demangled or p.symbol}: " if p.symbol else "") + p.detail
        for m in verdict.modules
        for p in m.problems
    ]
    if cxx11_abi is not None:  # without a label (its name names no ABI) no module is mislabelled
        problems += [
            f"{m.path}: built with _GLIBCXX_USE_CXX11_ABI={1 - cxx11_abi} but labelled cxx11abi{cxx11_abi}"
            for m in verdict.modules
            if m.declared.cxx11_abi not in (None, cxx11_abi)
        ]
    for (
        m
    ) in verdict.modules:  # the kernel library: from the kernel build found, else under its exact DT_NEEDED name here
        for u in m.undecided:
            if not FLASH_ATTN.is_kernel_library(u.name):
                problems.append(
                    f"{m.path}: needs {u.name}, found nowhere, so the verdict "
                    "cannot be told (what it imports was not checked)"
                )
            elif kernel:
                problems.append(
                    f"{m.path}: {u.name} is not in {kernel}, so the kernel launches it calls were not checked"
                )
            else:
                problems.append(
                    f"{m.path}: needs {u.name}, which the package does not hold under that name, so the load fails "
                    f'("cannot open shared object file")'
                )
    where = (
        f"torch {verdict.torch.version or '?'} (CUDA {verdict.torch.cuda or 'none'}) in {', '.join(verdict.against)}"
        + beside
    )
    if problems:
        return Check("abi", "failed", f"{len(problems)} problem(s) against {where}: " + "; ".join(problems[:5]))
    return Check("abi", "passed", f"{len(verdict.modules)} module(s) load against {where}")


def run_isolated(python: Path, code: str) -> subprocess.CompletedProcess:
    """`python -I`: no PYTHONPATH, no user site, no cwd on sys.path; only the env's site-packages."""
    return subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=600)


def import_gate(package: PackageFacts, venv: TorchVenv, kernel: PackageFacts | None = None) -> Check:
    with fresh_env(package, venv, kernel) as python:
        torch_only = run_isolated(python, "import torch")
        if torch_only.returncode != 0:
            return Check(
                "import", "skipped", f"torch {venv.torch} itself does not import here: {output_tail(torch_only)}"
            )
        result = run_isolated(python, "; ".join(f"import {m}" for m in IMPORTS))
    beside = f" and {kernel.filename}" if kernel else ""
    if result.returncode != 0:
        return Check(
            "import",
            "failed",
            f"`import {', '.join(IMPORTS)}` failed in a clean env with "
            f"PyPI torch {venv.torch}{beside}: {output_tail(result)}",
        )
    return Check(
        "import",
        "passed",
        f"imported {', '.join(IMPORTS[1:])} in a clean env with PyPI torch {venv.torch} (CUDA {venv.cuda}){beside}",
    )


@cache  # a kernel package's gpu gate is its flash-attn's run: one verify call runs it once
def gpu_gate(package: PackageFacts, venv: TorchVenv, kernel: PackageFacts | None = None) -> Check:
    """The GPU suite (faforge.gpu.run_suite) in a clean env: exit 0 passed, 1 failed, 3 skipped."""
    with fresh_env(package, venv, kernel) as python:
        env = dict(os.environ, PYTHONPATH=str(FAFORGE_SOURCE))
        result = subprocess.run(
            [str(python), "-m", "faforge.gpu.run_suite", "--json"], capture_output=True, text=True, env=env
        )
    return suite_check(result)


def suite_check(result: subprocess.CompletedProcess) -> Check:
    """The gpu gate's verdict from a `python -m faforge.gpu.run_suite --json` run: exit 0, 1, 3."""
    try:
        summary = json.loads(result.stdout)
    except json.JSONDecodeError:
        return Check(
            "gpu", "failed", f"the GPU suite exited {result.returncode} without a summary: {output_tail(result)}"
        )
    status = {0: "passed", 1: "failed", 3: "skipped"}.get(result.returncode, "failed")
    counts = summary.get("counts", {})
    words = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    return Check("gpu", status, f"{words or 'no tests'}" + (f"; {summary['reason']}" if summary.get("reason") else ""))


def output_tail(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


def torch_gates(
    gates: tuple[str, ...],
    against: list[Path] | None,
    torch_venv: Callable[[], TorchVenv],
    *,
    abi: Callable[[list[Path]], Check],
    imports: Callable[[TorchVenv], Check],
    gpu: Callable[[TorchVenv], Check],
) -> list[Check]:
    """The gates of a package that runs beside a torch (a flash-attn package or glue wheel): abi against `against`,
    else the torch venv's lib; import and gpu in that venv. `torch_venv()` is called only when a gate needs it;
    when it raises Unavailable, each gate that needs it is `skipped` with that reason, so it never reads as a pass."""
    venv, reason = None, ""  # reason: why torch_venv() raised, which a gate that needs the venv and finds none follows
    if set(gates) - ({"abi"} if against else set()):
        try:
            venv = torch_venv()
        except Unavailable as exc:
            reason = str(exc)
    checks = []
    for gate in gates:
        if gate == "abi" and against:
            checks.append(abi(against))
        elif gate == "abi" and venv is not None:
            checks.append(abi([venv.torch_lib]))
        elif venv is None:
            checks.append(Check(gate, "skipped", reason))
        elif gate == "import":
            checks.append(imports(venv))
        elif gate == "gpu":
            checks.append(gpu(venv))
    return checks
