"""Which jobs one `faforge build` means, all checked before the first build: the ids and parts asked for on
the command line or in a plan file, each an id of one family (a cell of the matrix, a pip cell, a package), a
piece of one as `faforge plan` split it, and the builds an `all` job takes (its kernel package once per kernel
key, then its cell).

Apart from running them (faforge.release.build.run) so that a bad id, part or plan file is refused, naming it and
where the ids are listed, before any build starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from faforge import paths, untrusted
from faforge.costmodel.runners import CELL_PART, KERNELS_LINK_PART, KERNELS_PART, load_build_cost, split_kernels
from faforge.errors import FaforgeError, shorten
from faforge.matrix import Matrix
from faforge.matrix.cells import Cell
from faforge.matrix.kernels import kernel_key
from faforge.release.build.stage import BuildFamily, listed
from faforge.release.plan.stage import jobs_in_plan

# Not `--json > FILE`: the shell creates FILE even when plan fails.
PLAN_HINT = (
    "write it with `faforge plan --output FILE` (written only when "
    "planning succeeds; without --channel it plans every cell, offline)"
)


def jobs_from_plan(path: str) -> list[tuple[str, str]]:
    """(cell id, part) of every job in a plan file, a single chunk, or a single job."""
    if not os.path.lexists(path):  # most often the file a failed `faforge plan` never wrote
        raise FaforgeError(f"--plan {path}: cannot read: no such file", hint=PLAN_HINT, input=path)
    text = paths.read_user_file(path, "--plan", hint=PLAN_HINT, kind="plan")
    if not text.strip():
        raise FaforgeError(
            f"--plan {path}: empty, so the `faforge plan` that was to write it failed (see its error)", hint=PLAN_HINT
        )
    data = untrusted.parse_json(text, f"--plan {path}", hint=PLAN_HINT)
    try:
        # A plan of any version: its stages are the lists of chunks it holds, in its order.
        planned = jobs_in_plan(data) if isinstance(data, dict) else None
        if planned is not None:
            jobs = planned
        elif isinstance(data, dict) and "include" in data:
            jobs = list(data["include"])
        else:
            jobs = [data]
    except (KeyError, TypeError):  # valid JSON of the wrong shape: a number for a chunk, a chunk without `include`
        jobs = [None]
    if not all(
        isinstance(j, dict) and isinstance(j.get("cell"), str) and isinstance(j.get("part", "all"), str) for j in jobs
    ):
        raise FaforgeError(
            f"--plan {path}: not a plan, a chunk or a job (each job needs a string `cell` and `part`)", hint=PLAN_HINT
        )
    return [(j["cell"], j.get("part", "all")) for j in jobs]


def piece_tus(cell: Cell, part: str) -> tuple[str, ...]:
    """The kernel TUs of a piece job, as faforge plan split the cell's kernel package; () for whole builds."""
    if part in ("all", KERNELS_PART, KERNELS_LINK_PART, CELL_PART):
        return ()
    pieces = [p for p in split_kernels(load_build_cost(), cell.platform, cell.cuda_archs) if p.tus]
    for piece in pieces:
        if piece.name == part:
            return piece.tus
    raise FaforgeError(
        f"--part {part}: {cell.id} has no such piece",
        hint=f"its kernel package's pieces are {', '.join(p.name for p in pieces)}, then {KERNELS_LINK_PART}"
        if pieces
        else f"its kernel package fits one job on its runner (variants/build-cost.yaml): --part {KERNELS_PART}",
    )


def require_known_ids(matrix: Matrix, ids: list[str], families: Sequence[BuildFamily]) -> dict[str, BuildFamily]:
    """The family that owns each id (the first that says so); else a bad-input error naming the id and where
    each family's ids are listed."""
    listing = ", ".join([*(f.words.listing for f in families), "`faforge plan` the jobs a channel lacks"])
    owners: dict[str, BuildFamily] = {}
    for key in ids:
        owner = next((f for f in families if f.owns(matrix, key)), None)
        if owner is not None:
            owners[key] = owner
            continue
        refusal = next((why for f in families if (why := f.refusal(matrix, key)) is not None), None)
        if refusal is not None:
            raise FaforgeError(refusal, hint=listing)
        examples = [e for f in families if (e := f.example(matrix)) is not None]
        raise FaforgeError(f"{shorten(repr(key))} is not {listed(examples, ' or ')}", hint=listing)
    return owners


def build_steps(
    jobs: list[tuple[Cell, str, tuple[str, ...]]], kernels_in_recipe: bool
) -> list[tuple[Cell, str, tuple[str, ...]]]:
    """The builds the jobs take, in order: an `all` job of a split recipe is its kernel package (once per
    kernel key in this run) and then its cell."""
    steps, kernels_seen = [], set()
    for cell, part, tus in jobs:
        if part != "all" or not kernels_in_recipe:
            steps.append((cell, part, tus))
            continue
        if kernel_key(cell) not in kernels_seen:
            kernels_seen.add(kernel_key(cell))
            steps.append((cell, KERNELS_PART, ()))
        steps.append((cell, CELL_PART, ()))
    return steps
