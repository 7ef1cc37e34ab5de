"""The gates of a kernel package (libflash-attn-kernels), apart from a flash-attn's (faforge.release.verify.gates)
because it has no python and no torch, so its gates mean:
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
A kernel wheel's gates (faforge.release.verify.wheel_kernel_gates) are these gates over its own files: the skeleton of
each (torch_free_gate, kernel_cuda_runtime, kernel_gates, gpu_through) has its one home here.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.abi.check import PLATFORM_MACHINES
from faforge.abi.elf_file import ElfError
from faforge.family import FLASH_ATTN
from faforge.kernels.torchfree import KERNEL_LIBRARY_EXPORTS, TorchFreeReport, check_torch_free
from faforge.matrix.kernels import KERNEL_LIBRARY
from faforge.release.clean_env import MACHINE_SUBDIRS, RuntimeVenv, cuda_runtime_venv, matching_torch_venv, unpacked
from faforge.release.package import PackageFacts
from faforge.release.venv_cache import Unavailable
from faforge.release.verify.gates import Check, gpu_gate, output_tail

if TYPE_CHECKING:
    from faforge.release.verify.wheel_identity import WheelPackage

# Run in the clean process: load the CUDA runtime by path, then the library, then its C interface.
DLOPEN = f"""
import ctypes, sys
library, cudarts = sys.argv[1], sys.argv[2:]
for cudart in cudarts:
    ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
handle = ctypes.CDLL(library)
handle.{FLASH_ATTN.kernel_api_prefix}set_cuda_error_handler
"""


def kernel_abi_gate(package: PackageFacts) -> Check:
    """The torch-free check of the kernel library, with the arch list and platform the package names."""

    @contextlib.contextmanager
    def library() -> Iterator[Path | None]:
        with unpacked(package) as prefix:
            found = prefix / "lib" / KERNEL_LIBRARY
            yield found if found.is_file() else None

    machine = PLATFORM_MACHINES.get(package.subdir)
    return torch_free_gate(
        package.cuda_archs,
        library,
        where=f"lib/{KERNEL_LIBRARY}",
        no_archs=f"{package.filename}: its build string names no arch list "
        "(cu<CUDA>_sm<archs>_philox<bits>_h<hash>_<n>), so its GPU code cannot be judged",
        missing=f"holds no lib/{KERNEL_LIBRARY}, the library every {FLASH_ATTN.package} pinning it loads",
        platform_problems=lambda built: (
            [f"wrong-architecture: built for {built}, but {package.subdir} runs {machine}"]
            if machine and built != machine
            else []
        ),
    )


def torch_free_gate(
    cuda_archs: str | None,
    library: Callable[[], AbstractContextManager[Path | None]],
    *,
    where: str,
    no_archs: str,
    missing: str,
    platform_problems: Callable[[str], list[str]],
) -> Check:
    """The abi gate of a kernel library (a package's or a wheel's): `skipped` with `no_archs` when its name gives no
    arch list, `failed` with `missing` when `library()` yields none, else check_torch_free's verdict on it. `where`:
    where the artifact holds it; `platform_problems(machine it was built for)`: its platform's complaints."""
    if cuda_archs is None:
        return Check("abi", "skipped", no_archs)
    with library() as found:
        if found is None:
            return Check("abi", "failed", missing)
        try:
            report = check_torch_free(found, expect_archs=cuda_archs, exports=KERNEL_LIBRARY_EXPORTS)
        except ElfError as exc:
            return Check("abi", "failed", f"{where}: {exc.message}")
    return judge_torch_free(report, where, cuda_archs, platform_problems(report.machine))


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


def kernel_gate(
    gate: str, package: PackageFacts, users: tuple[PackageFacts, ...], announce: Callable[[str], None]
) -> Check:
    return kernel_gates(
        gate,
        abi=lambda: kernel_abi_gate(package),
        imports=lambda: kernel_import_gate(package, announce),
        gpu=lambda: gpu_through(
            users,
            lambda user: matching_torch_venv(user, announce),
            lambda user, venv: gpu_gate(user, venv, package),
            what=FLASH_ATTN.package,
            none=f"its GPU code runs only through a {FLASH_ATTN.package} that pins this build; "
            "pass one (e.g. from the same output folder) in the same verify call",
        ),
    )


def kernel_gates(
    gate: str, *, abi: Callable[[], Check], imports: Callable[[], Check], gpu: Callable[[], Check]
) -> Check:
    """A kernel library's gate by name, a package's or a wheel's alike: the torch-free check, the dlopen beside
    PyPI's CUDA runtime, the GPU suite through a user (gpu_through)."""
    return {"abi": abi, "import": imports}.get(gate, gpu)()


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
