"""Why a cell id is not in the matrix, in words that name the cell: which fact or rule keeps it out.

faforge.matrix.cells makes the cells; a user who asks for one that is not there (`faforge build`, `render`, the
doctor's fixes) gets this instead, walking the same facts (the release table) and rules (the policy) in order.
"""

from __future__ import annotations

import re

from faforge.matrix.cells import CELL_ID, PIP_CELL_ID
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable
from faforge.versions import vtuple


def explain_missing(table: ReleaseTable, policy: BuildPolicy, cell_id: str) -> str:
    """Why a well-formed cell id is not in the matrix, in words that name the cell."""
    pip = PIP_CELL_ID.fullmatch(cell_id)
    if pip and pip["world"] in table.pip_worlds:
        return _explain_missing_pip(table, policy, cell_id, pip)
    match = CELL_ID.fullmatch(cell_id)
    if not match:
        return (
            f"{cell_id!r} is not a cell id (expected e.g. linux-64/py312/torch2.7/cu129/abi1, "
            "or pypi/linux-64/py312/torch2.11/cu130/abi1)"
        )
    platform, torch_minor, abi = match["platform"], match["torch"], int(match["abi"])
    python = f"{match['py']}.{match['pyminor']}"
    worlds = [w for w in table.worlds.values() if w.cxx11_abi == abi]
    if not worlds:
        return f"{cell_id}: no torch world uses C++ ABI {abi}"
    world = worlds[0]
    rows = table.rows_for(world.name, torch_minor)
    if platform not in world.platforms:
        return f"{cell_id}: the {world.name} world has no {platform} builds (it has {', '.join(world.platforms)})"
    if not rows:
        have = sorted({r.torch_minor for r in table.releases if r.world == world.name}, key=vtuple)
        return f"{cell_id}: {world.name} has no torch {torch_minor} (it has {', '.join(have)})"
    cudas = sorted({r.cuda for r in rows}, key=vtuple)
    by_tag = {c.replace(".", ""): c for c in cudas}
    cuda = by_tag.get(match["cuda"])
    if cuda is None:
        return (
            f"{cell_id}: {world.name} has no torch {torch_minor} build for CUDA "
            f"{match['cuda'][:-1]}.{match['cuda'][-1]} (it has {', '.join(cudas)})"
        )
    row = next(r for r in rows if r.cuda == cuda)
    if platform not in row.platforms:
        return f"{cell_id}: {world.name} torch {row.torch} with CUDA {cuda} exists only for {', '.join(row.platforms)}"
    if python not in row.python:
        return (
            f"{cell_id}: {world.name} torch {row.torch} with CUDA {cuda} exists only for python {', '.join(row.python)}"
        )
    if vtuple(cuda) < vtuple(policy.min_cuda):
        return f"{cell_id}: CUDA {cuda} is below the matrix floor {policy.min_cuda} ({policy.path.name}: min_cuda)"
    if vtuple(torch_minor) < vtuple(policy.min_torch):
        return (
            f"{cell_id}: torch {torch_minor} is below the matrix "
            f"floor {policy.min_torch} ({policy.path.name}: min_torch)"
        )
    if vtuple(python) < vtuple(policy.min_python):
        return (
            f"{cell_id}: python {python} is below the matrix floor {policy.min_python} ({policy.path.name}: min_python)"
        )
    excluded = policy.exclusion_for(world=world.name, torch=torch_minor, cuda=cuda, python=python, platform=platform)
    if excluded:
        return f"{cell_id}: excluded in {policy.path.name}: {excluded.reason}"
    return f"{cell_id}: not in the matrix"


def _explain_missing_pip(table: ReleaseTable, policy: BuildPolicy, cell_id: str, match: re.Match) -> str:
    world, platform, torch_minor, abi = match["world"], match["platform"], match["torch"], int(match["abi"])
    python = f"{match['py']}.{match['pyminor']}"
    rows = [
        r for r in table.pip_releases if r.world == world and r.torch_minor == torch_minor and platform in r.platforms
    ]
    if not rows:
        have = sorted(
            {r.torch_minor for r in table.pip_releases if r.world == world and platform in r.platforms}, key=vtuple
        )
        return (
            f"{cell_id}: {world} has no CUDA build of torch {torch_minor} "
            f"for {platform} (it has {', '.join(have) or 'none'})"
        )
    row = next((r for r in rows if r.cuda.replace(".", "") == match["cuda"]), None)
    if row is None:
        return (
            f"{cell_id}: {world}'s torch {torch_minor} for {platform} is built "
            f"for CUDA {', '.join(sorted({r.cuda for r in rows}, key=vtuple))}"
        )
    if row.cxx11_abi != abi:
        return (
            f"{cell_id}: {world}'s torch {row.torch} with CUDA "
            f"{row.cuda} is C++ ABI {row.cxx11_abi}, read from its build"
        )
    if python not in row.python:
        return (
            f"{cell_id}: {world}'s torch {row.torch} with CUDA {row.cuda} "
            f"has wheels only for python {', '.join(row.python)}"
        )
    floor = policy.pip_min_torch or policy.min_torch
    for value, least, key in (
        (row.cuda, policy.min_cuda, "min_cuda"),
        (torch_minor, floor, "pip.min_torch"),
        (python, policy.min_python, "min_python"),
    ):
        if vtuple(value) < vtuple(least):
            return f"{cell_id}: {value} is below the matrix floor {least} ({policy.path.name}: {key})"
    excluded = policy.exclusion_for(world=world, torch=torch_minor, cuda=row.cuda, python=python, platform=platform)
    if excluded:
        return f"{cell_id}: excluded in {policy.path.name}: {excluded.reason}"
    return f"{cell_id}: not in the matrix"
