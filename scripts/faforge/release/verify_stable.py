"""`faforge verify`'s gates for a flash-attn-3 package, which claims torch's stable ABI (issue 25 item 2).

Its abi gate is `check-abi --stable-abi` (faforge.abi.stable) on the package: it may import only torch's
stable C functions, and it must load on every torch of the range it serves. The range is the matrix's
(faforge.matrix.flash_attn_3, found by the package's platform, CUDA and arch list); each `--against` is
one torch release, and together they must hold the oldest and the newest minor of that range: a
narrower check proves less than the package claims, so it is `skipped` with what is missing, never
`passed`. The import and GPU gates are not written for this family yet: `skipped`, with the reason.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from faforge.abi.elf_file import ElfError
from faforge.abi.stable import check_stable
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN_3
from faforge.matrix import load_matrix
from faforge.matrix.flash_attn_3 import Fa3Package
from faforge.release.clean_env import MACHINE_SUBDIRS, Unavailable, cuda_runtime_venv
from faforge.release.package import PackageFacts
from faforge.release.verify import Check

# cu130_sm80_90a_faforge_h1a2b3c4_0 -> cu130_sm80_90a: what the recipe's build string starts with.
BUILD_HEAD = re.compile(r"^(?P<head>cu\d+_sm[0-9a-z_]+?)_faforge(?:_trimmed)?_h[0-9a-f]+_\d+$")


def is_stable_abi_package(package: PackageFacts) -> bool:
    return package.name == FLASH_ATTN_3.package


def served_package(package: PackageFacts) -> Fa3Package | None:
    """The matrix's FA3 package this file was built as (platform and build-string head), if any."""
    match = BUILD_HEAD.match(package.build)
    if not match:
        return None
    return next((p for p in load_matrix().fa3 if p.platform == package.subdir and p.build_string_head == match["head"]), None)


def stable_gates(package: PackageFacts, gates: tuple[str, ...], against: list[Path] | None) -> list[Check]:
    return [stable_abi_gate(package, against or []) if gate == "abi" else
            Check(gate, "skipped", f"the {gate} gate of a {FLASH_ATTN_3.package} package is not written yet; the abi gate "
                                   "(stable ABI against its torch range) is the one it passes") for gate in gates]


def stable_abi_gate(package: PackageFacts, against: list[Path]) -> Check:
    served = served_package(package)
    if served is None:
        return Check("abi", "skipped", f"{package.filename}: no {FLASH_ATTN_3.package} package of the matrix has its platform and "
                                       "build string (cu<CUDA>_sm<archs>_faforge_h<hash>_<n>), so the torch range it serves is unknown")
    range_text = f"{served.served[0]} to {served.served[-1]}"
    if not against:
        return Check("abi", "skipped", f"serves torch {range_text}: name the oldest and the newest release with --against "
                                       "(each one torch: torch/lib, site-packages or a prefix)")
    # The package's own CUDA runtime (its cuda-version pins the env's cuda-cudart), not the torch's: a cu130
    # package beside torch 2.10.0+cu128's libraries still loads PyPI's CUDA 13.0 runtime, as conda installs it.
    runtime_dirs: list[Path] = []
    if MACHINE_SUBDIRS.get(platform.machine()) == package.subdir:
        try:
            runtime_dirs = sorted({p.parent for p in cuda_runtime_venv(served.cuda).cudart()})
        except Unavailable as exc:
            return Check("abi", "skipped", f"the CUDA {served.cuda} runtime it loads could not be had: {exc}")
    try:
        verdict = check_stable(package.path, against, platform=package.subdir, library_dirs=runtime_dirs)
    except ElfError as exc:
        return Check("abi", "failed", exc.message)
    except FaforgeError as exc:
        return Check("abi", "skipped", f"a torch given with --against could not be read: {exc.message}")
    checked = [v.torch.version or "?" for v in verdict.releases]
    minors = {".".join(v.split(".")[:2]) for v in checked}
    problems = [f"unstable import {u.demangled or u.symbol} (from {u.library or 'torch'})" for u in verdict.unstable[:5]]
    problems += [f"torch {v.torch.version}: {p.kind}: {p.demangled or p.symbol or ''} {p.detail}".strip()
                 for v in verdict.releases if not v.ok for m in v.modules for p in m.problems][:5]
    if problems:
        return Check("abi", "failed", f"{len(problems)} problem(s) against torch {', '.join(checked)}: " + "; ".join(problems))
    missing = [m for m in (served.served[0], served.served[-1]) if m not in minors]
    if missing:
        return Check("abi", "skipped", f"loads on torch {', '.join(checked)} with {len(verdict.stable_imports)} stable C functions, but it "
                                       f"serves {range_text}: also check torch {' and '.join(dict.fromkeys(missing))} (--against)")
    return Check("abi", "passed", f"stable ABI: {len(verdict.stable_imports)} stable C functions and no other torch symbol; loads on torch "
                                  f"{', '.join(checked)} (serves {range_text})")
