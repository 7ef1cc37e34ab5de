"""The exact fix for each diagnosis, taken from our real matrix and channel.

A fix installs the matrix cell that matches the environment's torch: its
build-string glob (py312_torch2_7_cu129_cxx11abi1_*) comes from py-rattler-build's
own render of the recipe, and its channels from the cell's torch world, so the
command is what the channel really serves. When no cell matches, the fix says
why (faforge.matrix.cells.explain_missing), names the closest cells, and gives
the command that builds flash-attn locally against the environment's own torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from faforge.doctor import pip_fixes
from faforge.doctor.fix_commands import (
    Fix,
    conda_command,
    conda_environment,
    conda_install,
    local_build,
    pip_command,
    pip_fix,
    uninstall_pip_flash_attn,
)
from faforge.doctor.offers import Offer, Target, closest, conda_cuda, installed_torch, matching, release_of, target_of
from faforge.doctor.situation import ERROR, PACKAGE_MISSING, Problem, Situation
from faforge.family import FLASH_ATTN
from faforge.gpu import compat
from faforge.matrix import Matrix
from faforge.matrix.kernels import KERNEL_PACKAGE
from faforge.matrix.missing_cells import explain_missing
from faforge.matrix.pip_builds import PipBuild
from faforge.versions import vtuple

if TYPE_CHECKING:
    from faforge.doctor.facts import CondaRecord
    from faforge.matrix.kernels import KernelPin

# Problems that installing the right flash-attn build resolves.
REPLACE_FLASH_ATTN = (
    "python-tag-mismatch",
    "wrong-architecture",
    "glibc-too-old",
    "libstdcxx-too-old",
    "cxx11-abi-mismatch",
    "signature-drift",
    "layout-break",
    "cuda-major-mismatch",
    PACKAGE_MISSING,
    "gpu-arch-missing",
    "import-failed",
)
KERNEL_LIBRARY_KINDS = ("kernel-library-missing", "kernel-library-mismatch")
# The pip wheel that ships libcudart.so.N, per CUDA major, as torch's own wheels require it:
# torch-2.7.1 METADATA "nvidia-cuda-runtime-cu12==12.6.77"; torch-2.14.1 METADATA
# "cuda-toolkit[cudart]==13.0.3", whose METADATA requires "nvidia-cuda-runtime==13.0.96.*".
CUDART_WHEELS: dict[int | None, str] = {12: "nvidia-cuda-runtime-cu12", 13: "nvidia-cuda-runtime==13.*"}


def _archs_for(s: Situation, matrix: Matrix) -> str:
    gpus = sorted(
        {f"{g.capability[0]}{g.capability[1]}" for g in (*s.facts.gpus, *s.facts.torch.devices) if g.capability}
    )
    if gpus:
        return ";".join(gpus)
    return matrix.policy.pick("cuda_archs", s.torch_cuda) if s.torch_cuda else "80;90"


def _cell_archs_cover(offer: Offer | PipBuild, s: Situation) -> bool:
    sass, ptx = [], []
    for item in offer.cell.cuda_archs.split(";"):
        number = item.removesuffix("+PTX")
        sass.append(f"sm_{number}")
        if item.endswith("+PTX"):
            ptx.append(f"compute_{number}")
    capabilities = {g.capability for g in (*s.facts.gpus, *s.facts.torch.devices) if g.capability}
    return all(compat.check(c, tuple(sass), tuple(ptx)).status == compat.NATIVE for c in capabilities)


# -- planning ---------------------------------------------------------------------------------------


def plan(
    s: Situation, problems: list[Problem], matrix: Matrix, offers: list[Offer], pip_builds: Sequence[PipBuild] = ()
) -> list[Fix]:
    """The fixes, in order. A conda prefix gets conda lines from `offers` (its rendered cells); any other
    environment, which pip or uv installs into, gets the pip and uv lines of `pip_builds` (faforge.doctor.pip_fixes)."""
    kinds = tuple(p.kind for p in problems if p.severity == ERROR)
    if not kinds:
        return []
    version = matrix.policy.flash_attn_version
    pip_world = s.facts.conda is None
    if "torch-missing" in kinds or "torch-import-failed" in kinds:
        return pip_fixes.fresh(s, kinds, list(pip_builds)) if pip_world else _fresh(s, kinds, matrix, offers, version)
    if "mixed-channels" in kinds:
        return _one_world(s, kinds, offers)
    fixes: list[Fix] = []
    target = target_of(s)
    if "mixed-conda-pip-torch" in kinds and (record := s.torch.conda_record) is not None:
        target = target_of(s, conda_torch=True)
        fixes.append(
            Fix(
                "pip",
                f"remove pip's torch so conda's {record.name} {record.version} is the one imported",
                (
                    pip_command(s, "uninstall", "-y", "torch"),
                    conda_command(
                        s,
                        [record.channel_name],
                        [f"{record.name} =={record.version} {record.build}"],
                        "--force-reinstall",
                    ),
                ),
                resolves=("mixed-conda-pip-torch",),
            )
        )
    if "cpu-only-torch" in kinds:
        return fixes + (
            pip_fixes.cuda_torch(s, kinds, list(pip_builds))
            if pip_world
            else _cuda_torch(s, kinds, matrix, offers, version)
        )
    if "libcudart-missing" in kinds:
        fixes.append(_cudart(s))
    kernel_kinds = tuple(k for k in kinds if k in KERNEL_LIBRARY_KINDS)
    pin, flash_record = s.kernel_pin, s.flash_attn.conda_record  # the pin is read from that record
    if kernel_kinds and pin is not None and flash_record is not None:
        fixes.append(_kernel_library(s, kernel_kinds, pin, flash_record))
    # Without a pin to satisfy (a wheel, or files no conda record owns) a whole flash-attn replaces it.
    replaced = tuple(k for k in kinds if k in REPLACE_FLASH_ATTN or (k in kernel_kinds and s.kernel_pin is None))
    if replaced and pip_world:
        fixes += pip_fixes.replace_flash_attn(
            s,
            replaced,
            matrix,
            list(pip_builds),
            _archs_for(s, matrix),
            version,
            lambda build: _cell_archs_cover(build, s),
        )
    elif replaced:
        fixes += _replace_flash_attn(s, replaced, target, matrix, offers, version)
    return fixes


def _replace_flash_attn(
    s: Situation, kinds: tuple[str, ...], target: Target, matrix: Matrix, offers: list[Offer], version: str
) -> list[Fix]:
    from_conda = target.world is not None
    exact = matching(offers, target) if from_conda else None
    if exact is not None and ("gpu-arch-missing" not in kinds or _cell_archs_cover(exact, s)):
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
    build = local_build(s, _archs_for(s, matrix), kinds, version)
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


def _fresh(s: Situation, kinds: tuple[str, ...], matrix: Matrix, offers: list[Offer], version: str) -> list[Fix]:
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


def _one_world(s: Situation, kinds: tuple[str, ...], offers: list[Offer]) -> list[Fix]:
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


def _cuda_torch(s: Situation, kinds: tuple[str, ...], matrix: Matrix, offers: list[Offer], version: str) -> list[Fix]:
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


def _kernel_library(s: Situation, kinds: tuple[str, ...], pin: KernelPin, record: CondaRecord) -> Fix:
    """Install the exact kernel build flash-attn pins (`pin`, in its conda `record`), from the channel
    flash-attn came from; conda replaces a mismatched build in place."""
    return Fix(
        "conda-install",
        f"install the kernel build {FLASH_ATTN.package} {record.version} requires ({pin})",
        (conda_command(s, [record.channel_url], [f"{KERNEL_PACKAGE} =={pin.version} {pin.build}"]),),
        resolves=kinds,
    )


def _cudart(s: Situation) -> Fix:
    cuda = s.torch_cuda or ""
    major = int(cuda.split(".")[0]) if cuda[:1].isdigit() else None
    if s.facts.conda is not None:
        command = conda_command(s, ["conda-forge"], ["cuda-cudart", f"cuda-version =={cuda}"])
    else:
        command = pip_command(s, "install", CUDART_WHEELS.get(major, f"nvidia-cuda-runtime-cu{major}"))
    return Fix(
        "conda-install" if s.facts.conda is not None else "pip",
        f"install the CUDA {cuda} runtime (libcudart.so.{major})",
        (command,),
        resolves=("libcudart-missing",),
    )
