"""The import gate of a wheel of another machine (a linux-aarch64 wheel on x86_64), under qemu.

This machine's real pip installs our wheels from the loopback index for the wheel's platform (--platform TAG
--target DIR --only-binary=:all: --no-deps), then the target's Python imports them under qemu with the
--against torch behind them. A kernel wheel: pip --platform --target of it beside the CUDA runtime of the
--against torch's site (its nvidia/ folder), dlopen() under qemu, nothing preloaded. Its gpu gate is skipped
here: a GPU runner of that machine runs it. Apart from the native gates because it needs an emulator, a
sysroot and a target Python (faforge.release.verify.foreign), none of which the native gates know.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from faforge.abi.check import PLATFORM_MACHINES
from faforge.abi.emulator import Emulator
from faforge.gpu.stage import not_run_here
from faforge.release.pip_env import loopback_index, pip_target
from faforge.release.verify.foreign import (
    EMULATED_TIMEOUT_S,
    Emulation,
    emulator_for,
    import_from,
    no_target_python,
    target_python,
    torch_python,
    torch_sites,
)
from faforge.release.verify.gates import Check, output_tail
from faforge.release.verify.kernel import DLOPEN
from faforge.release.verify.wheel_identity import KERNEL, KERNEL_MEMBER, WheelPackage
from faforge.release.verify.wheel_pairs import torch_range


def gpu_skipped_text(wheel: WheelPackage, machine: str) -> str:
    return not_run_here("wheel", wheel.subdir or "", machine)


def emulated_kernel_import(
    wheel: WheelPackage, machine: str, against: Sequence[Path], emulation: Emulation, python_default: str
) -> Check:
    """The kernel wheel of another machine: this machine's pip installs it for its platform into a folder from the
    loopback index, beside the CUDA runtime of an --against torch's site-packages (its nvidia/ folder, where pip puts
    PyPI's runtime wheel), and the target's Python dlopen()s it under qemu with nothing preloaded and no
    LD_LIBRARY_PATH: its RUNPATH ($ORIGIN/../nvidia/cu13/lib) must find libcudart, its C interface resolve.
    `python_default`: the CPython pip resolves for when the torch's site names none (its family's)."""
    emulator, why_not = emulator_for(machine, emulation)
    if emulator is None:
        return Check("import", "skipped", f"not run: {why_not}")
    python = target_python(machine, emulation)
    if python is None:
        return Check(
            "import",
            "skipped",
            f"not run: no {machine} Python to dlopen it with; name one with --target-python or "
            "$FAFORGE_TARGET_PYTHON (a plain prefix's bin/python, or a conda linux-aarch64 prefix's)",
        )
    sites = [site for site in torch_sites(against) if (site / "nvidia").is_dir()]
    if not sites:
        return Check(
            "import",
            "skipped",
            f"no {machine} CUDA runtime to load it beside: pass --against the site-packages of a "
            f"{machine} torch of CUDA {wheel.cuda} (its nvidia/ folder holds PyPI's runtime wheel)",
        )
    site = sites[-1]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    with tempfile.TemporaryDirectory(prefix="faforge-target-") as tmp, loopback_index(KERNEL, [wheel.facts]) as url:
        target = Path(tmp) / "site-packages"
        run = pip_target(
            target,
            [wheel.requirement],
            index_url=url,
            platforms=list(wheel.facts.platform_tags),
            python=torch_python(site) or python_default,
            abi=None,
        )
        if run.returncode != 0:
            return Check(
                "import",
                "failed",
                f"pip could not install {wheel.requirement} for {wheel.facts.platform_tags[0]} from the "
                f"loopback index: {run.errors()}",
            )
        library = target / KERNEL_MEMBER
        if not library.is_file():
            return Check("import", "failed", f"pip installed it, but there is no {KERNEL_MEMBER} in the target folder")
        (target / "nvidia").symlink_to(
            site / "nvidia", target_is_directory=True
        )  # pip's layout: the runtime wheel beside it
        started = time.monotonic()
        try:
            result = subprocess.run(
                [*emulator.command(python), "-I", "-c", DLOPEN, str(library)],
                capture_output=True,
                text=True,
                timeout=EMULATED_TIMEOUT_S,
                env=env,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return Check(
                "import",
                "failed",
                f"the dlopen under {Path(emulator.qemu).name} did not finish in {EMULATED_TIMEOUT_S} s",
            )
    how = (
        f"pip --platform {wheel.facts.platform_tags[0]} --target from the "
        f"loopback index {url}, beside the CUDA runtime of {site}/nvidia; "
        f"emulated: {Path(emulator.qemu).name} -L {emulator.sysroot} {python}, {time.monotonic() - started:.0f} s"
    )
    if result.returncode != 0:
        return Check(
            "import",
            "failed",
            f"dlopen of {KERNEL_MEMBER} with nothing preloaded failed ({how}): {output_tail(result)}",
        )
    return Check(
        "import",
        "passed",
        f"dlopen of {KERNEL_MEMBER} on {machine}, nothing preloaded: its RUNPATH finds libcudart beside it, "
        f"its C interface resolves ({how})",
    )


def emulated_wheel_import(
    wheel: WheelPackage,
    kernel: WheelPackage | None,
    against: list[Path],
    emulator: Emulator | None,
    why_not: str | None,
    python: Path | None,
    *,
    imports: tuple[str, ...],
    python_default: str,
) -> Check:
    """pip installs our wheels for the wheel's platform into a folder from the loopback index; the target's
    Python imports them (`imports`, its family's) under qemu with the newest --against torch behind them.
    `python_default`: the CPython pip resolves for when neither the wheel's tags nor the torch's site name one."""
    machine = emulator.machine if emulator else PLATFORM_MACHINES.get(wheel.subdir or "", "?")
    if emulator is None:
        return Check("import", "skipped", f"not run: {why_not}")
    if python is None:
        return no_target_python(machine, "a plain prefix's bin/python, or a conda linux-aarch64 prefix's")
    sites = torch_sites(against)
    if not sites:
        return Check(
            "import",
            "skipped",
            f"no {machine} torch to import beside: pass --against the site-packages of one (pip install "
            "--target DIR --platform manylinux_2_28_aarch64 --only-binary=:all: torch==VERSION)",
        )
    site = sites[-1]
    version = wheel.python or torch_python(site) or python_default
    ours = (wheel, *((kernel,) if kernel else ()))
    cuda = (wheel.cuda or "").replace(".", "")
    served = [] if wheel.torch_minor else torch_range(wheel)  # a wheel of one torch minor names it
    # The staging index, named as ours are.
    index = f"torch{wheel.torch_minor or (served[-1].torch_minor if served else '')}-cu{cuda}"
    with (
        tempfile.TemporaryDirectory(prefix="faforge-target-") as tmp,
        loopback_index(index, [w.facts for w in ours]) as url,
    ):
        target = Path(tmp) / "site-packages"
        platforms = sorted({t for w in ours for t in w.facts.platform_tags})
        run = pip_target(
            target,
            [w.requirement for w in ours],
            index_url=url,
            platforms=platforms,
            python=version,
            # a wheel of one CPython ABI (cp311) is resolved for it; abi3 and pure wheels for none
            abi=f"cp{version.replace('.', '')}" if any(t.startswith("cp") for t in wheel.facts.abi_tags) else None,
        )
        if run.returncode != 0:
            return Check(
                "import",
                "failed",
                f"pip could not install {', '.join(w.requirement for w in ours)} for {', '.join(platforms)} "
                f"from the loopback index: {run.errors()}",
            )

        def how(seconds: float) -> str:
            return (
                f"pip --platform {platforms[0]} --target from the loopback "
                f"index {url}; emulated: {Path(emulator.qemu).name} -L "
                f"{emulator.sysroot} {python}, {seconds:.0f} s, torch from {site}"
            )

        return import_from([str(target)], emulator.command(python), site, imports, how, machine, cwd=Path(tmp))
