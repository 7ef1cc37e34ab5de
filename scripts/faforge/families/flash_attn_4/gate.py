"""The import gate of a proposed FA4 set on this machine (`faforge bump --gate`): a clean venv of this
Python, with pip installing torch, every package of the set at its exact version and the release's own
wheel (checked against PyPI's sha256), then `import flash_attn.cute` and FA4's version read from its
distribution (flash_attn.cute.__version__ says 0.0.0). No GPU and no driver is needed: the CuTe DSL loads
its highest installed CUDA flavour when there is no libcuda. It costs a torch install (pip reads the machine's
own configuration: its index and find-links), so bump runs it only when asked."""

from __future__ import annotations

import datetime
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from faforge.abi.platforms import MACHINE_PLATFORM
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.families.flash_attn_4 import sets
from faforge.family import FLASH_ATTN_4

TIMEOUT_S = 3600  # a torch install with its CUDA libraries from an index
BY = "faforge bump --gate"
PROBE = (
    f"import importlib.metadata, {FLASH_ATTN_4.module}\n"
    f"print(importlib.metadata.version({FLASH_ATTN_4.package!r}), {FLASH_ATTN_4.module}.__file__)\n"
)


def here() -> tuple[str, str]:
    """(platform, Python) of this machine, as a set names them."""
    return MACHINE_PLATFORM.get(platform.machine(), platform.machine()), f"{sys.version_info[0]}.{sys.version_info[1]}"


def _step(command: list[str], what: str, kgs: sets.KnownGoodSet) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise FaforgeError(f"import gate of {kgs.version} {kgs.id}: {what} took over {TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).split())[-800:]
        raise FaforgeError(
            f"import gate of {FLASH_ATTN_4.package} {kgs.version} {kgs.id}: {what} failed: {tail}",
            hint="the set is not proposed as gated: read the reason, fix the set by hand or wait for upstream",
            exit_code=EXIT_PROBLEMS,
        )
    return done.stdout


def run(kgs: sets.KnownGoodSet, torch: str, wheel: Path) -> sets.Proof:
    """The proof that `kgs` with torch `torch` imports here; a FaforgeError (exit 1) naming the step otherwise."""
    where, python = here()
    if where not in kgs.platforms or python not in kgs.python:
        raise FaforgeError(
            f"--gate: this machine ({where}, Python {python}) is not among the set {kgs.id}'s "
            f"({', '.join(kgs.platforms)}; Python {', '.join(kgs.python)})",
            hint="run it on a machine and Python the set serves",
        )
    with tempfile.TemporaryDirectory(prefix="fa4-gate-") as tmp:
        env = Path(tmp) / "env"
        _step([sys.executable, "-m", "venv", str(env)], "creating a clean venv", kgs)
        pins = [f"torch=={torch}", *(f"{name}=={v}" for name, v in kgs.packages.items()), str(wheel)]
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--no-input", "--only-binary", ":all:", *pins]
        _step(pip, "pip install", kgs)
        said = _step([str(env / "bin" / "python"), "-c", PROBE], f"import {FLASH_ATTN_4.module}", kgs).split()
    if not said or said[0] != kgs.version:
        raise FaforgeError(f"import gate of {kgs.id}: the environment has {FLASH_ATTN_4.package} {said[:1]}")
    return sets.Proof(
        level="import-gated",
        platform=where,
        python=python,
        where=platform.node() or "unnamed machine",
        date=datetime.date.today().isoformat(),
        by=BY,
    )
