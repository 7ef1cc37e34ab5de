"""`faforge verify`'s gates for a flash-attn-3 package, which claims torch's stable ABI.

Its abi gate is `check-abi --stable-abi` (faforge.abi.stable) on the package: it may import only torch's
stable C functions, and it must load on every torch of the range it serves. The range is the matrix's
(faforge.families.flash_attn_3.matrix, found by the package's platform, CUDA and arch list); each `--against` is
one torch release, and together they must hold the oldest and the newest minor of that range: a
narrower check proves less than the package claims, so it is `skipped` with what is missing, never
`passed`. The import gate imports flash_attn_3, its extension and flash_attn_interface with each
`--against` torch that is a site-packages (torch/ with its Python files), by `python -I` in a fresh
prefix: natively, or under qemu for a package of another machine (faforge.release.verify.foreign).
The gpu gate runs the FA3 suite (`faforge test-gpu --family flash-attn-3`) beside the newest of them,
or, given none (CI's GPU job), beside PyPI's torch of the newest minor the package serves.
This module is the family's `verify` namespace (faforge.release.verify.family.VerifyFamily): its packages'
gates here, its wheel's in faforge.families.flash_attn_3.verify_wheel.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from faforge.abi.check import PLATFORM_MACHINES
from faforge.abi.emulator import is_foreign
from faforge.families.flash_attn_3.matrix import Fa3Package, packages_of
from faforge.families.flash_attn_3.stable_check import FA3_PYTHON, stable_abi_check
from faforge.families.flash_attn_3.verify_wheel import wheel_gates as wheel_gates  # its protocol's hook
from faforge.families.flash_attn_3.wheel import FA3_WHEEL
from faforge.family import FLASH_ATTN_3
from faforge.matrix import load_matrix
from faforge.release.clean_env import pypi_torch_venv, unpacked
from faforge.release.package import PackageFacts
from faforge.release.venv_cache import Unavailable, find_python
from faforge.release.verify.family import GateCall
from faforge.release.verify.foreign import (
    Emulation,
    emulated_import_gate,
    emulator_for,
    gpu_skipped,
    import_in_prefix,
    target_python,
    torch_python,
    torch_sites,
)
from faforge.release.verify.gates import FAFORGE_SOURCE, Check, suite_check

# What `faforge wheel` packs and `faforge verify` gates of this family as wheels (their gates: verify_wheel).
wheels = (FA3_WHEEL,)
gates_help = "an FA3 wheel's stable-ABI check over the torch range of its indexes"


def owns(package: PackageFacts) -> bool:
    return package.name == FLASH_ATTN_3.package


def served_package(package: PackageFacts) -> Fa3Package | None:
    """The matrix's FA3 package this file was built as (its id, from platform and build string), if any."""
    return (
        next((p for p in packages_of(load_matrix()) if p.id == package.package_id), None)
        if package.package_id
        else None
    )


def package_gates(
    package: PackageFacts, call: GateCall, *, kernel: PackageFacts | None = None, users: tuple[PackageFacts, ...] = ()
) -> list[Check]:
    """One binary for a torch range: its own gates, on any machine (it pins no kernel build and none pins it)."""
    against = call.against
    run = {
        "abi": lambda: stable_abi_gate(package, against or []),
        "import": lambda: stable_import_gate(package, against or [], call.emulation),
        "gpu": lambda: stable_gpu_gate(package, against or [], call.announce),
    }
    return [run[gate]() for gate in call.gates]


def stable_import_gate(package: PackageFacts, against: list[Path], emulation: Emulation) -> Check:
    """Imports beside each --against torch; passed only when every one passed."""
    sites, machine = torch_sites(against), PLATFORM_MACHINES.get(package.subdir, package.subdir)
    if not sites:
        return Check(
            "import",
            "skipped",
            "no torch to import beside: pass --against the site-packages of a torch of its range "
            "(pip install --target DIR torch==VERSION)",
        )
    if is_foreign(machine):
        emulator, why_not = emulator_for(machine, emulation)
        python = target_python(machine, emulation)
        checks = [
            emulated_import_gate(package, [site], None, emulator, why_not, python, FLASH_ATTN_3.imports)
            for site in sites
        ]
    else:
        checks = [native_import(package, site, machine) for site in sites]
    return combined("import", checks)


def native_import(package: PackageFacts, site: Path, machine: str) -> Check:
    version = torch_python(site)
    try:
        python = find_python(version) if version else None
    except Unavailable as exc:
        return Check("import", "skipped", f"the torch in {site} is for Python {version}: {exc}")
    if python is None:
        return Check("import", "skipped", f"{site}: no torch/_C.cpython-3*.so, so not a torch this machine can import")
    return import_in_prefix(
        (package,),
        [str(python)],
        site,
        FLASH_ATTN_3.imports,
        lambda seconds: f"native: {python}, {seconds:.0f} s, torch from {site}",
        machine,
    )


def combined(gate: str, checks: list[Check]) -> Check:
    """One verdict of several runs: failed if any failed, passed if all passed, else skipped."""
    for result in ("failed", "skipped"):
        if any(c.result == result for c in checks):
            return Check(gate, result, "; ".join(c.detail for c in checks if c.result == result))
    return Check(gate, "passed", "; ".join(c.detail for c in checks))


def stable_gpu_gate(
    package: PackageFacts, against: list[Path], announce: Callable[[str], None] = lambda message: None
) -> Check:
    """The FA3 GPU suite on this machine's GPU beside the newest --against torch that is a site-packages,
    else beside PyPI's torch of the newest minor it serves (a cached venv, as the other families' gate)."""
    machine = PLATFORM_MACHINES.get(package.subdir, package.subdir)
    if is_foreign(machine):
        return gpu_skipped(package, machine)
    sites, served = torch_sites(against), served_package(package)
    try:
        if sites:
            site, python = sites[-1], find_python(torch_python(sites[-1]) or "")
        elif served is not None:
            venv = pypi_torch_venv(f"=={served.served[-1]}.*", FA3_PYTHON, announce=announce)
            site, python = venv.site_packages, venv.python
        else:
            return Check(
                "gpu",
                "skipped",
                f"{package.filename}: not a package of the matrix, so "
                "no torch of its range is known; pass --against one",
            )
    except Unavailable as exc:
        return Check("gpu", "skipped", f"no torch to run the suite beside: {exc}")
    with unpacked(package) as prefix:
        own = [str(p) for p in [*prefix.glob("lib/python3*/site-packages"), *prefix.glob("site-packages")]]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(FAFORGE_SOURCE), *own, str(site)]))
        result = subprocess.run(
            [str(python), "-m", "faforge.gpu.run_suite", "--family", FLASH_ATTN_3.package, "--json"],
            capture_output=True,
            text=True,
            env=env,
            cwd=prefix,
        )
    return suite_check(result)


def stable_abi_gate(package: PackageFacts, against: list[Path]) -> Check:
    served = served_package(package)
    if served is None:
        return Check(
            "abi",
            "skipped",
            f"{package.filename}: no {FLASH_ATTN_3.package} package of the matrix has its platform and "
            "build string (cu<CUDA>_sm<archs>_faforge_h<hash>_<n>), so the torch range it serves is unknown",
        )
    return stable_abi_check(
        package.path, subdir=package.subdir, cuda=served.cuda, served=served.served, against=against
    )
