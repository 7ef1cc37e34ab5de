"""The exact fix for each diagnosis, taken from our real matrix and channel: which problems call for which
fix, in order. A conda prefix gets conda lines (faforge.doctor.conda_fixes), any other environment, which pip
or uv installs into, the pip world's (faforge.doctor.pip_fixes); a missing CUDA runtime is either's.
"""

from __future__ import annotations

from collections.abc import Sequence

from faforge.doctor import conda_fixes, pip_fixes
from faforge.doctor.fix_commands import Fix, conda_command, pip_command
from faforge.doctor.offers import Offer, target_of
from faforge.doctor.situation import ERROR, PACKAGE_MISSING, Problem, Situation
from faforge.gpu import compat
from faforge.matrix import Matrix
from faforge.matrix.pip_builds import PipBuild

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
        return pip_fixes.fresh(s, kinds, list(pip_builds)) if pip_world else conda_fixes.fresh(s, kinds, offers)
    if "mixed-channels" in kinds:
        return conda_fixes.one_world(s, kinds, offers)
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
            pip_fixes.cuda_torch(s, kinds, list(pip_builds)) if pip_world else conda_fixes.cuda_torch(s, kinds, offers)
        )
    if "libcudart-missing" in kinds:
        fixes.append(_cudart(s))
    kernel_kinds = tuple(k for k in kinds if k in KERNEL_LIBRARY_KINDS)
    pin, flash_record = s.kernel_pin, s.flash_attn.conda_record  # the pin is read from that record
    if kernel_kinds and pin is not None and flash_record is not None:
        fixes.append(conda_fixes.kernel_library(s, kernel_kinds, pin, flash_record))
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
        fixes += conda_fixes.replace_flash_attn(
            s, replaced, target, matrix, offers, version, _archs_for(s, matrix), lambda o: _cell_archs_cover(o, s)
        )
    return fixes


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
