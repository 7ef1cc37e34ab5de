"""The gates a package passes before publish. Each returns passed, failed or skipped with a reason.

A flash-attn package: ABI (against the cell's torch libraries), import in a clean environment, and
the GPU suite. The torch comes from faforge.release.clean_env (the matching PyPI wheel). When no
matching torch exists here every gate that needs one is `skipped`, with the reason, so it can never
read as a pass. A split flash-attn (the split build) pins one kernel build (`libflash-attn-kernels ==V BUILD`);
its gates run with that kernel package installed beside it: the ABI gate resolves the glue's
libflash_attn_kernels.so from the kernel package's lib/, and the clean env holds both packages.

A kernel package (libflash-attn-kernels) has no python and no torch, so its gates mean:
  * abi: the torch-free check (faforge.kernels.torchfree) of its lib/libflash_attn_kernels.so: no torch,
    c10, Python or pybind11 library or symbol, only ABI-neutral `run_mha_*`/`flash_attn_kernels_*`
    exports, a binary for the package's platform, and GPU code equal to the arch list its build string
    names (cu130_sm80_90_100_120ptx_philox64_... -> '80;90;100;120+PTX');
  * import: the library is dlopen()ed in a clean process (python -I, no LD_LIBRARY_PATH) after
    loading only PyPI's CUDA runtime wheel of the package's CUDA minor (the libcudart a torch
    environment has), and its C interface resolves; `skipped` when that wheel cannot be had or the
    package is for another machine;
  * gpu: its GPU code runs only through a flash-attn that calls it, so the GPU suite runs in the
    clean env of a flash-attn of the same verify call that pins exactly this build (one run serves
    both packages); `skipped` when the call holds none, or none has a matching torch here.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.abi.check import PLATFORM_MACHINES, check_path
from faforge.abi.elf_file import ElfError
from faforge.abi.report import Verdict
from faforge.family import FLASH_ATTN
from faforge.kernels.torchfree import KERNEL_LIBRARY_EXPORTS, TorchFreeReport, check_torch_free
from faforge.matrix.kernels import KERNEL_LIBRARY
from faforge.release.clean_env import (
    MACHINE_SUBDIRS,
    RuntimeVenv,
    TorchVenv,
    Unavailable,
    cuda_runtime_venv,
    fresh_env,
    matching_torch_venv,
    unpacked,
)
from faforge.release.package import PackageFacts

if TYPE_CHECKING:
    from faforge.release.wheel_identity import WheelPackage

# The modules the recipe's own `python: imports` test imports; torch first, as the family's module does.
IMPORTS = FLASH_ATTN.imports
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


def kernel_abi_gate(package: PackageFacts) -> Check:
    """The torch-free check of the kernel library, with the arch list and platform the package names."""
    if package.cuda_archs is None:
        return Check(
            "abi",
            "skipped",
            f"{package.filename}: its build string names no arch list "
            "(cu<CUDA>_sm<archs>_philox<bits>_h<hash>_<n>), so its GPU code cannot be judged",
        )
    with unpacked(package) as prefix:
        library = prefix / "lib" / KERNEL_LIBRARY
        if not library.is_file():
            return Check(
                "abi",
                "failed",
                f"holds no lib/{KERNEL_LIBRARY}, the library every {FLASH_ATTN.package} pinning it loads",
            )
        try:
            report = check_torch_free(library, expect_archs=package.cuda_archs, exports=KERNEL_LIBRARY_EXPORTS)
        except ElfError as exc:
            return Check("abi", "failed", f"lib/{KERNEL_LIBRARY}: {exc.message}")
    machine = PLATFORM_MACHINES.get(package.subdir)
    platform_problems = (
        [f"wrong-architecture: built for {report.machine}, but {package.subdir} runs {machine}"]
        if machine and report.machine != machine
        else []
    )
    return judge_torch_free(report, f"lib/{KERNEL_LIBRARY}", package.cuda_archs, platform_problems)


def judge_torch_free(report: TorchFreeReport, library: str, cuda_archs: str, platform_problems: list[str]) -> Check:
    """The abi gate's verdict on a kernel library from check_torch_free's report: `platform_problems` (its machine
    against the package's platform, as the caller tells it) first,
    then the report's. `library`: where the package holds it."""
    problems = [*platform_problems, *(f"{p.kind}: {p.demangled or p.subject}: {p.detail}" for p in report.problems)]
    if problems:
        return Check(
            "abi",
            "failed",
            f"{len(problems)} problem(s) in the torch-free check of {library}: " + "; ".join(problems[:5]),
        )
    gpu = ", ".join([*report.gpu.sass, *report.gpu.ptx])
    return Check(
        "abi",
        "passed",
        f"{library} is torch-free: needs {', '.join(report.needed)}; {report.exports} exports, "
        f"all {KERNEL_LIBRARY_EXPORTS}; GPU code {gpu} = arch list {cuda_archs}",
    )


# Run in the clean process: load the CUDA runtime by path, then the library, then its C interface.
DLOPEN = f"""
import ctypes, sys
library, cudarts = sys.argv[1], sys.argv[2:]
for cudart in cudarts:
    ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
handle = ctypes.CDLL(library)
handle.{FLASH_ATTN.kernel_api_prefix}set_cuda_error_handler
"""


def kernel_cuda_runtime(
    package: PackageFacts | WheelPackage, named_by: str, announce: Callable[[str], None]
) -> RuntimeVenv:
    """The venv of PyPI's CUDA runtime a kernel library (a package's or a wheel's: its `subdir`, `cuda`, `filename`)
    is loaded beside here. Unavailable when it is another machine's library, when its name (`named_by`: 'its build
    string') names no CUDA, or when that runtime cannot be had."""
    if package.subdir != MACHINE_SUBDIRS.get(platform.machine()):
        raise Unavailable(f"a {package.subdir} library cannot be loaded on this {platform.machine()} machine")
    if package.cuda is None:
        raise Unavailable(f"{package.filename}: {named_by} names no CUDA, so no CUDA runtime can be matched")
    return cuda_runtime_venv(package.cuda, announce)


def kernel_import_gate(package: PackageFacts, announce: Callable[[str], None]) -> Check:
    """dlopen of the kernel library in a clean process that has only PyPI's CUDA runtime of its CUDA."""
    try:
        runtime = kernel_cuda_runtime(package, "its build string", announce)
    except Unavailable as exc:
        return Check("import", "skipped", str(exc))
    if not runtime.cudart():
        return Check(
            "import",
            "skipped",
            f"PyPI's {runtime.requirement} installed no libcudart.so.* under {runtime.site_packages}/nvidia",
        )
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    with unpacked(package) as prefix:
        library = prefix / "lib" / KERNEL_LIBRARY
        if not library.is_file():
            return Check("import", "failed", f"holds no lib/{KERNEL_LIBRARY}")
        result = subprocess.run(
            [str(runtime.python), "-I", "-c", DLOPEN, str(library), *map(str, runtime.cudart())],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    if result.returncode != 0:
        return Check(
            "import",
            "failed",
            f"dlopen of lib/{KERNEL_LIBRARY} with PyPI's {runtime.requirement} failed: {output_tail(result)}",
        )
    return Check(
        "import",
        "passed",
        f"dlopen of lib/{KERNEL_LIBRARY} in a clean process with PyPI's {runtime.requirement} "
        "(no torch); its C interface resolves",
    )


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


def run_gates(
    package: PackageFacts,
    gates: tuple[str, ...],
    against: list[Path] | None = None,
    announce: Callable[[str], None] = lambda message: None,
    *,
    kernel: PackageFacts | None = None,
    users: tuple[PackageFacts, ...] = (),
) -> list[Check]:
    """Run `gates` (abi, import, gpu) on one package; gates without a matching torch are skipped.
    `kernel` is the kernel package a split flash-attn pins (found by
    faforge.release.kernel_package.find_kernel_package); for a kernel package, `users` are
    the flash-attn packages of the same call that pin it (its gpu gate runs through them).
    `announce` hears about slow set-up (a torch venv built on first use) before it starts."""
    if package.is_kernel_package:
        return [kernel_gate(gate, package, users, announce) for gate in gates]
    return torch_gates(
        gates,
        against,
        lambda: matching_torch_venv(package, announce),
        abi=lambda libraries: abi_gate(package, libraries, kernel),
        imports=lambda venv: import_gate(package, venv, kernel),
        gpu=lambda venv: gpu_gate(package, venv, kernel),
    )


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


def kernel_gate(
    gate: str, package: PackageFacts, users: tuple[PackageFacts, ...], announce: Callable[[str], None]
) -> Check:
    if gate == "abi":
        return kernel_abi_gate(package)
    if gate == "import":
        return kernel_import_gate(package, announce)
    return gpu_through(
        users,
        lambda user: matching_torch_venv(user, announce),
        lambda user, venv: gpu_gate(user, venv, package),
        what=FLASH_ATTN.package,
        none=f"its GPU code runs only through a {FLASH_ATTN.package} that pins this build; "
        "pass one (e.g. from the same output folder) in the same verify call",
    )


def gpu_through(users: tuple, torch_venv: Callable, suite: Callable, *, what: str, none: str) -> Check:
    """A kernel package's gpu gate: its GPU code runs only through a flash-attn that pins it, so the GPU suite
    (`suite(user, venv)`) of the first of `users` whose torch venv (`torch_venv(user)`) can be had here. `skipped`
    with `none` when there are no users, else naming each user's reason (Unavailable) as of no `what` that can run."""
    reasons = []
    for user in users:
        try:
            venv = torch_venv(user)
        except Unavailable as exc:
            reasons.append(f"{user.filename}: {exc}")
            continue
        run = suite(user, venv)
        return Check("gpu", run.result, f"the GPU suite through {user.filename}: {run.detail}")
    if not reasons:
        return Check("gpu", "skipped", none)
    return Check("gpu", "skipped", f"no {what} pinning it can run here: " + "; ".join(reasons))
