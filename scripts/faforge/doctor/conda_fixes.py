"""The fixes for a conda environment, or for one that a conda environment replaces: the `conda install` line of
the matrix cell that matches its torch, a new environment from the closest cell, the kernel build flash-attn
pins.

A cell's build-string glob (py312_torch2_7_cu129_cxx11abi1_*) comes from py-rattler-build's own render of the
recipe, and its channels from the cell's torch world, so the command is what the channel really serves. When no
cell matches, the fix says why (faforge.matrix.missing_cells), names the closest cells, and gives the command
that builds flash-attn locally against the environment's own torch. faforge.doctor.fixes picks these or the
pip world's (faforge.doctor.pip_fixes) per diagnosis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from faforge.doctor.fix_commands import (
    Fix,
    conda_command,
    conda_environment,
    conda_install,
    local_build,
    pip_fix,
    uninstall_pip_flash_attn,
)
from faforge.doctor.offers import Offer, Target, closest, conda_cuda, installed_torch, matching, release_of
from faforge.doctor.situation import Situation
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix
from faforge.matrix.kernels import KERNEL_PACKAGE
from faforge.matrix.missing_cells import explain_missing
from faforge.versions import vtuple

if TYPE_CHECKING:
    from faforge.doctor.facts import CondaRecord
    from faforge.matrix.kernels import KernelPin


def replace_flash_attn(
    s: Situation,
    kinds: tuple[str, ...],
    target: Target,
    matrix: Matrix,
    offers: list[Offer],
    version: str,
    archs: str,
    covers: Callable[[Offer], bool],
) -> list[Fix]:
    """The cell matching `target` when it has one whose GPU code covers the GPUs here (`covers`), else why
    there is none, the closest cells and a local build for `archs`."""
    from_conda = target.world is not None
    exact = matching(offers, target) if from_conda else None
    if exact is not None and ("gpu-arch-missing" not in kinds or covers(exact)):
        fix = conda_install(s, exact, kinds)
        if (
            "glibc-too-old" in kinds
            and s.facts.system.glibc
            and vtuple(s.facts.system.glibc) < vtuple(exact.cell.c_stdlib_version)
        ):
            fix = replace(
                fix,
                notes=(
                    f"this build needs glibc >= {exact.cell.c_stdlib_version}; the system has "
                    f"{s.facts.system.glibc}, so run it in a newer OS or container",
                ),
            )
        return [fix]
    fixes = []
    build = local_build(s, archs, kinds, version)
    build = replace(build, commands=(*uninstall_pip_flash_attn(s), *build.commands))
    if from_conda:
        reason = (
            explain_missing(matrix.table, matrix.policy, target.cell_id)
            if target.cell_id
            else "the torch build is not known"
        )
        near = closest(offers, target)
        fixes.append(
            Fix(
                "no-matching-cell",
                f"faforge has no build for this environment ({reason})",
                notes=tuple(
                    f"closest: {o.cell.id} ({o.build_glob}): {conda_command(s, o.channels, [*o.torch_specs, o.spec])}"
                    for o in near
                ),
                resolves=kinds,
            )
        )
    else:
        build = replace(
            build,
            notes=(
                f"your {s.torch_words} came from pip ({s.torch.origin}); "
                "faforge's packages are conda packages built against "
                f"conda's pytorch, so either build {FLASH_ATTN.package} for this torch or move to a conda environment",
                *build.notes,
            ),
        )
    fixes.append(build)
    if not from_conda:
        near = closest(
            offers, Target(target.platform, target.python, target.torch, target.cuda, None, "conda-forge"), n=1
        )
        if near:
            fixes.append(
                conda_environment(
                    near[0], f"or use a conda environment with faforge's build for cell {near[0].cell.id}", kinds
                )
            )
    return fixes


def fresh(s: Situation, kinds: tuple[str, ...], offers: list[Offer]) -> list[Fix]:
    """No usable torch: a new conda environment from the cell closest to the torch that is installed (its
    metadata says which, even when it cannot be imported; else the newest cell for this Python), or pip's
    torch plus a local build."""
    installed = installed_torch(s)
    target = Target(s.facts.system.platform, s.facts.python.minor, installed.torch, installed.cuda, None, "conda-forge")
    near = closest(offers, target, n=1)
    fixes = []
    if near:
        offer = near[0]
        if s.facts.conda is not None:
            fixes.append(conda_install(s, offer, kinds, with_torch=True))
        else:
            fixes.append(
                conda_environment(
                    offer, f"create a conda environment with torch and faforge's build for cell {offer.cell.id}", kinds
                )
            )
    if (
        installed.cuda and s.torch.how == "pip"
    ):  # a CUDA build already, whose CUDA libraries (nvidia-* wheels) are missing
        fixes.append(
            pip_fix(
                s,
                f"or reinstall PyPI's torch {installed.torch} with the CUDA {installed.cuda} libraries it "
                f"requires (nvidia-* wheels), then build {FLASH_ATTN.package} for it",
                ("--force-reinstall", f"torch=={s.torch.version}"),
                kinds,
            )
        )
    else:
        fixes.append(
            pip_fix(
                s,
                "or install a CUDA build of torch from PyPI here (its Linux "
                f"wheels are CUDA builds), then build {FLASH_ATTN.package} for it",
                ("torch",),
                kinds,
            )
        )
    return fixes


def one_world(s: Situation, kinds: tuple[str, ...], offers: list[Offer]) -> list[Fix]:
    record = s.facts.conda_record("pytorch") or s.facts.conda_record("libtorch")
    world = record.world if record else "conda-forge"
    target = Target(
        s.facts.system.platform,
        s.facts.python.minor,
        release_of(record.version) if record else None,
        conda_cuda(record.build) if record else None,
        0 if world == "pytorch" else 1,
        world,
    )
    near = closest(offers, target, n=1)
    if not near:
        return [Fix("no-matching-cell", "faforge has no build for this platform and Python", resolves=kinds)]
    offer = near[0]
    return [
        conda_environment(
            offer,
            f"recreate the environment from one world ({offer.cell.world}: channels "
            f"{', '.join(offer.channels)}) with faforge's build for cell {offer.cell.id}",
            kinds,
        )
    ]


def cuda_torch(s: Situation, kinds: tuple[str, ...], offers: list[Offer]) -> list[Fix]:
    target = Target(
        s.facts.system.platform,
        s.facts.python.minor,
        release_of(s.torch_version),
        None,
        s.torch_abi,
        "conda-forge" if s.facts.conda is not None else None,
    )
    near = closest(offers, target, n=1)
    fixes = []
    if s.facts.conda is not None and near:
        fixes.append(conda_install(s, near[0], kinds, with_torch=True))
        return fixes
    release = release_of(s.torch_version)
    fixes.append(
        pip_fix(
            s,
            f"replace the CPU torch with PyPI's CUDA build of torch {release}, then build {FLASH_ATTN.package} for it",
            ("--force-reinstall", f"torch=={release}"),
            kinds,
            ("PyPI's Linux wheels of torch are CUDA builds; +cpu builds come from download.pytorch.org/whl/cpu",),
        )
    )
    if near:
        fixes.append(
            conda_environment(
                near[0], f"or use a conda environment with faforge's build for cell {near[0].cell.id}", kinds
            )
        )
    return fixes


def kernel_library(s: Situation, kinds: tuple[str, ...], pin: KernelPin, record: CondaRecord) -> Fix:
    """Install the exact kernel build flash-attn pins (`pin`, in its conda `record`), from the channel
    flash-attn came from; conda replaces a mismatched build in place."""
    return Fix(
        "conda-install",
        f"install the kernel build {FLASH_ATTN.package} {record.version} requires ({pin})",
        (conda_command(s, [record.channel_url], [f"{KERNEL_PACKAGE} =={pin.version} {pin.build}"]),),
        resolves=kinds,
    )
