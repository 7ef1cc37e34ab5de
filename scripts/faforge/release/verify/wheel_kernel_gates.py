"""The kernel wheel's gates (libflash-attn-kernels, +cu130.sm80.90.100.120ptx.philox64.h<hash>): it holds no torch
code, so its gates are not the glue's.

  - abi: the torch-free check (faforge.kernels.torchfree) of libflash_attn_kernels/libflash_attn_kernels.so.1,
    with the arch list its label names and the machine of its platform tag;
  - import: real pip installs it (--no-deps --no-index) into a hardlink copy of the cached venv holding only
    PyPI's CUDA runtime of its CUDA, and a clean process dlopen()s it with nothing preloaded and no
    LD_LIBRARY_PATH: its RUNPATH ($ORIGIN/../nvidia/cu13/lib) must find libcudart, its C interface resolve
    (a wheel of another machine: faforge.release.verify.wheel_emulation);
  - gpu: its code runs only through a glue wheel of the same call that pins it (that run serves both).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from faforge.abi.check import PLATFORM_MACHINES
from faforge.abi.emulator import is_foreign
from faforge.family import FLASH_ATTN
from faforge.pipwheel.members import check_members
from faforge.release.clean_env import TorchVenv
from faforge.release.pip_env import pip_install_file, site_packages, venv_copy
from faforge.release.venv_cache import Unavailable
from faforge.release.verify.foreign import NOTHING_NAMED, Emulation
from faforge.release.verify.gates import Check, output_tail
from faforge.release.verify.kernel import DLOPEN, gpu_through, kernel_cuda_runtime, kernel_gates, torch_free_gate
from faforge.release.verify.wheel_emulation import emulated_kernel_import, gpu_skipped_text
from faforge.release.verify.wheel_identity import KERNEL_MEMBER, WheelPackage
from faforge.release.verify.wheel_venv import REPORT_LOADED, cell_venv, loaded_from_elsewhere, pip_gpu_gate


def kernel_library(wheel: WheelPackage, folder: Path) -> Path | None:
    """The kernel wheel's library, extracted into `folder`; None when the wheel holds none."""
    with zipfile.ZipFile(wheel.path) as archive:
        check_members(archive, str(wheel.path))
        if KERNEL_MEMBER not in archive.namelist():
            return None
        return Path(archive.extract(KERNEL_MEMBER, folder))


def kernel_wheel_gate(
    gate: str,
    wheel: WheelPackage,
    users: tuple[WheelPackage, ...],
    announce: Callable[[str], None],
    *,
    against: Sequence[Path] = (),
    emulation: Emulation = NOTHING_NAMED,
    python: str,
) -> Check:
    """`python`: the CPython an emulated install resolves for when the --against torch names none (its family's)."""
    machine = PLATFORM_MACHINES.get(wheel.subdir or "")

    def user_torch(user: WheelPackage) -> TorchVenv:
        user_machine = PLATFORM_MACHINES.get(user.subdir or "")
        if is_foreign(user_machine):
            raise Unavailable(gpu_skipped_text(user, user_machine))
        return cell_venv(user, announce)

    return kernel_gates(
        gate,
        abi=lambda: kernel_abi_gate(wheel),
        imports=lambda: (
            emulated_kernel_import(wheel, machine, against, emulation, python)
            if is_foreign(machine)
            else kernel_import_gate(wheel, announce)
        ),
        gpu=lambda: gpu_through(
            users,
            user_torch,
            lambda user, venv: pip_gpu_gate(user, (wheel,), venv),
            what=f"{FLASH_ATTN.package} wheel",
            none=f"its GPU code runs only through a {FLASH_ATTN.package} wheel that pins this one; pass one "
            "(e.g. from the same output folder) in the same verify call",
        ),
    )


def kernel_abi_gate(wheel: WheelPackage) -> Check:
    """The torch-free check of the kernel library, with the arch list its label names and its platform's machine."""

    @contextlib.contextmanager
    def library() -> Iterator[Path | None]:
        with tempfile.TemporaryDirectory(prefix="faforge-kernel-wheel-") as tmp:
            yield kernel_library(wheel, Path(tmp))

    def platform_problems(built: str) -> list[str]:
        machine = PLATFORM_MACHINES.get(wheel.subdir or "")
        if machine is None:
            return [f"platform: its tags {'.'.join(wheel.facts.platform_tags)} name no one Linux machine"]
        if built != machine:
            return [f"wrong-architecture: built for {built}, but its tag {wheel.facts.platform_tags[0]} says {machine}"]
        return []

    return torch_free_gate(
        wheel.cuda_archs,
        library,
        where=KERNEL_MEMBER,
        no_archs=f"{wheel.filename}: its local label names no arch list "
        "(+cu<CUDA>.sm<archs>.philox<bits>.h<hash>), so its GPU code cannot be judged",
        missing=f"holds no {KERNEL_MEMBER}, the library every {FLASH_ATTN.package} wheel pinning it loads",
        platform_problems=platform_problems,
    )


def kernel_import_gate(wheel: WheelPackage, announce: Callable[[str], None]) -> Check:
    """pip installs the kernel wheel beside PyPI's CUDA runtime
    alone; a clean process dlopen()s it with nothing preloaded."""
    try:
        runtime = kernel_cuda_runtime(wheel, "its local label", announce)
    except Unavailable as exc:
        return Check("import", "skipped", str(exc))
    with venv_copy(runtime.site_packages.parents[2]) as prefix:
        python = prefix / "bin" / "python"
        run = pip_install_file(python, wheel.path)
        if run.returncode != 0:
            return Check(
                "import", "failed", f"pip would not install it beside PyPI's {runtime.requirement}: {run.errors()}"
            )
        library = site_packages(prefix) / KERNEL_MEMBER
        if not library.is_file():
            return Check("import", "failed", f"pip installed it, but there is no {KERNEL_MEMBER} in site-packages")
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
        result = subprocess.run(
            [str(python), "-I", "-c", DLOPEN + REPORT_LOADED, str(library)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        elsewhere = loaded_from_elsewhere(result.stdout, prefix, ("libcudart.so",))
    if result.returncode != 0:
        return Check(
            "import",
            "failed",
            f"dlopen of {KERNEL_MEMBER} (pip-installed beside PyPI's {runtime.requirement}, nothing "
            f"preloaded) failed: {output_tail(result)}",
        )
    if elsewhere:
        return Check(
            "import",
            "failed",
            f"dlopen of {KERNEL_MEMBER} loaded {'; '.join(elsewhere)}, not PyPI's {runtime.requirement} beside "
            "it: its RUNPATH does not reach pip's nvidia/*/lib (a machine without that library cannot load it)",
        )
    return Check(
        "import",
        "passed",
        f"pip installed it (--no-deps) beside PyPI's {runtime.requirement}; dlopen of {KERNEL_MEMBER} in a "
        "clean process, nothing preloaded: its RUNPATH finds libcudart in the venv, its C interface resolves",
    )
