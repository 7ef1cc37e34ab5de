"""The fixes for an environment pip or uv installs into (a venv, a uv venv, a system Python): the exact
`pip install` / `uv pip install` line of the pip cell that matches its torch, never a conda line.

A pip cell (faforge.matrix.pip_builds) is one glue wheel for PyPI's torch of one minor, CUDA, C++ ABI,
CPython and platform, in the wheel index of its torch minor and CUDA (BASE/torch2.11-cu130/). The line
keeps the installed torch (pinned to its release, so the resolver never swaps it), takes flash-attn only as
that exact wheel (faforge.pipindex.instructions says why each word) and brings the kernel wheel and einops
as its requirements. An installed flash-attn is removed first (pip) or reinstalled (uv's
--reinstall-package), so a broken build of the very same version is replaced too. Where no pip cell
matches, the fix says why (faforge.matrix.missing_cells), gives the nearest cells' lines and the
local build against this torch.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from faforge.doctor.fix_commands import (
    Fix,
    externally_managed_note,
    local_build,
    pip_command,
    pip_fix,
    pip_target,
    uninstall_pip_flash_attn,
)
from faforge.doctor.installs import UV_VENV, environment_kind
from faforge.doctor.offers import (
    Target,
    closest,
    installed_torch,
    release_of,
    target_of,
)
from faforge.doctor.situation import Situation
from faforge.family import FLASH_ATTN
from faforge.matrix.missing_cells import explain_missing
from faforge.matrix.pip_builds import PipBuild
from faforge.pipindex import instructions
from faforge.versions import minor_of

if TYPE_CHECKING:
    from faforge.matrix import Matrix

PIP_INSTALL, UV_INSTALL = "pip-install", "uv-install"
NEAREST = 3


def matching(builds: list[PipBuild], target: Target, *, any_cuda: bool = False) -> PipBuild | None:
    """The pip cell of the target's platform, python, torch minor, CUDA and C++ ABI (an ABI or CUDA the
    environment cannot tell matches any: a pip world has one ABI per release)."""
    if target.platform is None or target.torch is None:
        return None
    for b in builds:
        c = b.cell
        if (c.platform, c.python, c.torch_minor) != (target.platform, target.python, minor_of(target.torch)):
            continue
        if (any_cuda or c.cuda == target.cuda) and target.cxx11_abi in (None, c.cxx11_abi):
            return b
    return None


def _public(version: str | None) -> str | None:
    """'2.14.1+cu130' -> '2.14.1': the pin an installed torch of either index satisfies (PEP 440)."""
    return version.split("+", 1)[0] if version else None


def install_fix(
    s: Situation, build: PipBuild, resolves: tuple[str, ...], *, torch: str | None = None, title: str | None = None
) -> Fix:
    """Install the glue wheel of `build` beside torch==`torch` (default: the installed torch's release)."""
    cell = build.cell
    index = instructions.index_url(cell.index_name)
    python = s.facts.python.executable
    torch = torch or _public(s.torch.version) or cell.torch
    pins = instructions.requirements(build.glue_version, torch)
    title = title or f"install faforge's wheel for pip cell {cell.id} from its index ({cell.index_name})"
    installed = s.flash_attn.how == "pip"
    uv = instructions.uv_command(
        index, pins, python, *(["--reinstall-package", FLASH_ATTN.package] if installed else [])
    )
    again = "then `faforge doctor --python {}` again"
    if environment_kind(s.facts) == UV_VENV:
        return Fix(
            UV_INSTALL,
            title,
            (uv,),
            cell=cell.id,
            index_url=index,
            resolves=resolves,
            notes=(
                f"{s.facts.python.prefix} is a uv venv: uv installs into it (--python), pip may not be there",
                again.format(python),
            ),
        )
    setup, target = pip_target(s)
    if setup:  # a new venv holds no torch: the pins bring PyPI's torch of the cell, which the glue is built against
        pins = instructions.requirements(build.glue_version, cell.torch)
        return Fix(
            PIP_INSTALL,
            title,
            (*setup, instructions.pip_command(index, pins, target)),
            cell=cell.id,
            index_url=index,
            resolves=resolves,
            notes=(*externally_managed_note(s, target), again.format(target)),
        )
    ensure = () if s.facts.python.pip else (shlex.join([python, "-m", "ensurepip"]),)
    commands = (*ensure, *uninstall_pip_flash_attn(s), instructions.pip_command(index, pins, python))
    return Fix(
        PIP_INSTALL,
        title,
        commands,
        cell=cell.id,
        index_url=index,
        resolves=resolves,
        notes=(f"or with uv: {uv}", again.format(python)),
    )


def _nearest_lines(s: Situation, builds: list[PipBuild], target: Target) -> tuple[str, ...]:
    """Each nearest cell's line, which holds that cell's torch; the torch change it needs is a command of its own
    before it, never a side effect of the install (a forced reinstall: a torch of the same release and another
    CUDA satisfies the pin and would stay)."""
    near = closest(builds, target, n=NEAREST)
    python, yours = (
        s.facts.python.executable,
        f"replace this torch {s.torch.version}" if s.torch.version else "install torch",
    )
    lines = []
    for b in near:
        then = instructions.pip_command(
            instructions.index_url(b.cell.index_name), instructions.requirements(b.glue_version, b.cell.torch), python
        )
        lines.append(
            f"nearest: {b.cell.id} (PyPI's torch {b.cell.torch}, CUDA {b.cell.cuda}): first {yours}: "
            f"{pip_command(s, 'install', '--force-reinstall', f'torch=={b.cell.torch}')}; then: {then}"
        )
    return tuple(lines)


def _why_none(matrix: Matrix, builds: list[PipBuild], target: Target) -> str:
    if target.cell_id is None:
        return f"the environment's {'torch' if target.torch is None else 'CUDA or C++ ABI'} is not known"
    world = min({b.cell.world for b in builds}, default="pypi")
    return explain_missing(matrix.table, matrix.policy, f"{world}/{target.cell_id}")


def replace_flash_attn(
    s: Situation,
    kinds: tuple[str, ...],
    matrix: Matrix,
    builds: list[PipBuild],
    archs: str,
    version: str,
    covers: Callable[[PipBuild], bool],
) -> list[Fix]:
    """The installed flash-attn does not fit this torch: the pip cell's wheel that does, else the nearest
    cells and a build from source."""
    target = target_of(s)
    exact = matching(builds, target)
    if exact is not None and ("gpu-arch-missing" not in kinds or covers(exact)):
        return [install_fix(s, exact, kinds)]
    if exact is not None:
        reason = f"{exact.cell.id}'s wheel has no GPU code for this GPU (archs {exact.cell.cuda_archs})"
    else:
        reason = _why_none(matrix, builds, target)
    build = local_build(s, archs, kinds, version)
    build = replace(build, commands=(*uninstall_pip_flash_attn(s), *build.commands))
    return [
        Fix(
            "no-matching-cell",
            f"faforge's wheel index has no wheel for this environment ({reason})",
            notes=_nearest_lines(s, builds, target),
            resolves=kinds,
        ),
        build,
    ]


def fresh(s: Situation, kinds: tuple[str, ...], builds: list[PipBuild]) -> list[Fix]:
    """No usable torch. A torch whose metadata names its release and CUDA (a CUDA build whose NVIDIA wheels
    are missing) is reinstalled, then its cell's wheel installed; with no torch at all, the newest pip cell
    for this Python brings PyPI's torch and its wheel in one line."""
    installed = installed_torch(s)
    fixes = []
    exact = matching(builds, installed)
    if installed.cuda and s.torch.how == "pip":
        fixes.append(
            pip_fix(
                s,
                f"reinstall PyPI's torch {installed.torch} with the CUDA "
                f"{installed.cuda} libraries it requires (nvidia-* wheels)",
                ("--force-reinstall", f"torch=={s.torch.version}"),
                kinds,
            )
        )
    if exact is not None:
        fixes.append(install_fix(s, exact, kinds, torch=_public(s.torch.version)))
        return fixes
    newest = closest(builds, replace(installed, torch=None, cuda=None), n=1)
    if newest:
        b = newest[0]
        fixes.append(
            install_fix(
                s,
                b,
                kinds,
                torch=b.cell.torch,
                title=f"{'or ' if fixes else ''}install PyPI's torch "
                f"{b.cell.torch} (CUDA {b.cell.cuda}) and faforge's wheel "
                f"for pip cell {b.cell.id}",
            )
        )
    return fixes


def cuda_torch(s: Situation, kinds: tuple[str, ...], builds: list[PipBuild]) -> list[Fix]:
    """A CPU-only torch: PyPI's CUDA build of the same release (PyPI's Linux torch wheels are CUDA builds),
    then the wheel of that release's pip cell."""
    release = release_of(s.torch_version)
    fixes = [
        pip_fix(
            s,
            f"replace the CPU torch with PyPI's CUDA build of torch {release}",
            ("--force-reinstall", f"torch=={release}"),
            kinds,
            ("PyPI's Linux wheels of torch are CUDA builds; +cpu builds come from download.pytorch.org/whl/cpu",),
        )
    ]
    target = Target(s.facts.system.platform, s.facts.python.minor, release, None, s.torch_abi, None)
    cell = matching(builds, target, any_cuda=True)
    if cell is not None:
        fixes.append(
            install_fix(
                s,
                cell,
                kinds,
                torch=release,
                title="then install faforge's wheel for pip cell "
                f"{cell.cell.id} from its index ({cell.cell.index_name})",
            )
        )
    return fixes
