"""Which jobs one `faforge build` means, all checked before the first build: the ids and parts asked for on
the command line or in a plan file, each a cell of the matrix, a pip cell or an FA3 package, a piece of one as
`faforge plan` split it, and the builds an `all` job takes (its kernel package once per kernel key, then its cell).

Apart from running them (faforge.release.build_run) so that a bad id, part or plan file is refused, naming it and
where the ids are listed, before any build starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence

from faforge import paths, untrusted
from faforge.errors import FaforgeError, shorten
from faforge.families.flash_attn_3.matrix import Fa3Package, packages_of
from faforge.families.flash_attn_3.plan import FA3_PART, fa3_parts
from faforge.family import FLASH_ATTN_3
from faforge.matrix import Matrix
from faforge.matrix.cells import CELL_ID, PIP_CELL_ID, Cell, find_cell
from faforge.matrix.kernels import kernel_key
from faforge.matrix.missing_cells import explain_missing
from faforge.release.cost import (
    CELL_PART,
    KERNELS_LINK_PART,
    KERNELS_PART,
    BuildCost,
    Part,
    load_build_cost,
    split_kernels,
)
from faforge.release.plan import jobs_in_plan

# What `faforge build` is handed to find an FA3 piece's TUs: each package's split_kernels jobs by id
# (faforge.families.flash_attn_3.plan.piece_estimates).
Fa3Estimator = Callable[[list[Fa3Package], BuildCost], Mapping[str, Sequence[Part]]]

# An FA3 package id as faforge.families.flash_attn_3.matrix spells it: platform/cu<CUDA>/sm<archs>.
FA3_ID = re.compile(r"(linux-64|linux-aarch64)/cu\d+/sm[0-9a-z_]+")
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


def require_known_ids(matrix: Matrix, ids: list[str]) -> None:
    """Every id a cell of the matrix, a pip cell, or one of its FA3 packages;
    else a bad-input error naming it and where the ids are listed."""
    fa3 = [p.id for p in packages_of(matrix)]
    listed = (
        "`faforge matrix` lists every cell, `faforge matrix --world "
        "pypi` every pip cell, `faforge matrix --fa3` every "
        f"{FLASH_ATTN_3.package} package, `faforge plan` the jobs a channel lacks"
    )
    cells: list[Cell] = [*matrix.cells, *matrix.pip_cells]
    for key in ids:
        if key in fa3 or find_cell(cells, key) is not None:
            continue
        if CELL_ID.fullmatch(key) or PIP_CELL_ID.fullmatch(key):
            raise FaforgeError(explain_missing(matrix.table, matrix.policy, key), hint=listed)
        if FA3_ID.fullmatch(key):
            raise FaforgeError(
                f"{key}: no {FLASH_ATTN_3.package} package of the "
                f"matrix has this id (it has {', '.join(fa3) or 'none'})",
                hint=listed,
            )
        example = f" or a {FLASH_ATTN_3.package} package id (e.g. {fa3[0]})" if fa3 else ""
        raise FaforgeError(
            f"{shorten(repr(key))} is not a cell id (e.g. linux-64/py312/torch2.7/cu129/abi1){example}", hint=listed
        )


def fa3_jobs(
    matrix: Matrix, wanted: list[tuple[str, str]], estimate: Fa3Estimator | None
) -> list[tuple[Fa3Package, str, tuple[str, ...]]]:
    """The FA3 jobs among the wanted ones, each once, in order: (package, part, the piece's TUs or () for `all`),
    the pieces as faforge plan split the package (faforge.families.flash_attn_3.plan.fa3_parts over `estimate`)."""
    by_id = {p.id: p for p in packages_of(matrix)}
    asked = list(dict.fromkeys((key, part) for key, part in wanted if key in by_id))
    split = [by_id[key] for key, part in asked if part != FA3_PART]
    cost = load_build_cost() if split else None
    estimates = estimate(split, cost) if cost is not None and estimate else {}
    jobs: list[tuple[Fa3Package, str, tuple[str, ...]]] = []
    for key, part in asked:
        package = by_id[key]
        if part == FA3_PART:
            jobs.append((package, part, ()))
            continue
        assert cost is not None  # loaded above for every package asked for in pieces (`split`)
        pieces = [p for p in fa3_parts(cost, package, estimates.get(key, ())) if p.tus]
        piece = next((p for p in pieces if p.name == part), None)
        if piece is None:
            raise FaforgeError(
                f"--part {part}: {key} is a {FLASH_ATTN_3.package} package without such a piece",
                hint=f"its pieces are {', '.join(p.name for p in pieces)}, then {FA3_PART}"
                if pieces
                else f"it fits one job on its runner (variants/build-cost.yaml): --part {FA3_PART} (the default)",
            )
        jobs.append((package, part, piece.tus))
    return jobs


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
