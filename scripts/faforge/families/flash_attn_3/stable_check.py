"""The stable-ABI gate of one FlashAttention-3 binary (a conda package's or a wheel's) over the torch minors it
serves: `check-abi --stable-abi` (faforge.abi.stable) against each --against torch, which together must hold the
oldest and the newest minor of that range; a narrower check proves less than the binary claims, so it is
`skipped` with what is missing, never `passed`."""

from __future__ import annotations

import platform
from pathlib import Path

from faforge.abi.elf_file import ElfError
from faforge.abi.stable import check_stable
from faforge.errors import FaforgeError
from faforge.release.clean_env import MACHINE_SUBDIRS, cuda_runtime_venv
from faforge.release.venv_cache import Unavailable
from faforge.release.verify.gates import Check

# The CPython of the venv an FA3 package's or wheel's gates make (abi3: it serves every CPython of its range) when
# no --against torch names one.
FA3_PYTHON = "3.11"


def stable_abi_check(path: Path, *, subdir: str, cuda: str, served: tuple[str, ...], against: list[Path]) -> Check:
    """The stable-ABI gate of one binary (a package or a wheel) of CUDA
    `cuda` that serves the torch minors `served`, oldest first."""
    range_text = f"{served[0]} to {served[-1]}"
    if not against:
        return Check(
            "abi",
            "skipped",
            f"serves torch {range_text}: name the oldest and the newest release with --against "
            "(each one torch: torch/lib, site-packages or a prefix)",
        )
    # The package's own CUDA runtime (its cuda-version pins the env's cuda-cudart), not the torch's: a cu130
    # package beside torch 2.10.0+cu128's libraries still loads PyPI's CUDA 13.0 runtime, as conda installs it.
    runtime_dirs: list[Path] = []
    if MACHINE_SUBDIRS.get(platform.machine()) == subdir:
        try:
            runtime_dirs = sorted({p.parent for p in cuda_runtime_venv(cuda).cudart()})
        except Unavailable as exc:
            return Check("abi", "skipped", f"the CUDA {cuda} runtime it loads could not be had: {exc}")
    try:
        verdict = check_stable(path, against, platform=subdir, library_dirs=runtime_dirs)
    except ElfError as exc:
        return Check("abi", "failed", exc.message)
    except FaforgeError as exc:
        return Check("abi", "skipped", f"a torch given with --against could not be read: {exc.message}")
    checked = [v.torch.version or "?" for v in verdict.releases]
    minors = {".".join(v.split(".")[:2]) for v in checked}
    problems = [
        f"unstable import {u.demangled or u.symbol} (from {u.library or 'torch'})" for u in verdict.unstable[:5]
    ]
    problems += [
        f"torch {v.torch.version}: {p.kind}: {p.demangled or p.symbol or ''} {p.detail}".strip()
        for v in verdict.releases
        if not v.ok
        for m in v.modules
        for p in m.problems
    ][:5]
    if problems:
        return Check(
            "abi", "failed", f"{len(problems)} problem(s) against torch {', '.join(checked)}: " + "; ".join(problems)
        )
    missing = [m for m in (served[0], served[-1]) if m not in minors]
    if missing:
        return Check(
            "abi",
            "skipped",
            f"loads on torch {', '.join(checked)} with {len(verdict.stable_imports)} stable C functions, but it "
            f"serves {range_text}: also check torch {' and '.join(dict.fromkeys(missing))} (--against)",
        )
    return Check(
        "abi",
        "passed",
        f"stable ABI: {len(verdict.stable_imports)} stable C functions and no other torch symbol; loads on torch "
        f"{', '.join(checked)} (serves {range_text})",
    )
