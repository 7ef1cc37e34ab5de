"""flash-attn 2's build stage (faforge.release.build.stage.BuildFamily): its ids are the matrix's cells and pip
cells, built from recipes/flash-attn (a cell's kernel package and flash-attn, faforge.release.build.cells) and
its pip cells' wheels (faforge.release.build.pip), after every family's packages."""

from __future__ import annotations

from faforge.costmodel.runners import CELL_PART, KERNELS_LINK_PART, KERNELS_PART
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix
from faforge.matrix.cells import CELL_ID, PIP_CELL_ID, find_cell
from faforge.matrix.missing_cells import explain_missing
from faforge.release.build.cells import cell_jobs
from faforge.release.build.stage import BuildWords
from faforge.release.plan.pip import WHEEL_PART

words = BuildWords(
    ids=("cell ids as `faforge matrix` prints them", "pip cell ids as `faforge matrix --world pypi` does"),
    parts=(
        KERNELS_PART,
        "a kernel piece such as bwd-1of4",
        KERNELS_LINK_PART,
        CELL_PART,
        f"{WHEEL_PART} (a pip cell's wheels)",
    ),
    whole=("cell", "pip cell"),
    source=f"from this {FLASH_ATTN.package} sdist instead of the recipe's PyPI one",
    listing="`faforge matrix` lists every cell, `faforge matrix --world pypi` every pip cell",
    named="cells (see `faforge matrix`)",
    built=f"{FLASH_ATTN.package} cells",
    about=(
        "`--part` builds one job as `faforge plan` made it: `kernels` and `kernels-link` build the recipe's "
        f"{FLASH_ATTN.kernel_package} output for the cell's kernel key (platform, CUDA, archs, Philox layout), a "
        "piece compiles its share of those TUs into the compiler cache; `cell` builds the cell's "
        f"{FLASH_ATTN.package} against a kernel package it finds in a channel. `all` (the default) builds both, as "
        "a plain `rattler-build build` of the recipe would: the cell's kernel package first (once per kernel key in "
        f"a run, skipped when already in the output dir), then its {FLASH_ATTN.package}, which finds it there: "
        "rattler-build indexes its output dir and solves from it as a channel."
    ),
    about_after=(
        "A pip cell id (`faforge matrix --world pypi`: pypi/<platform>/py<XY>/torch<minor>/cu<NNN>/abi<N>) builds "
        "its glue wheel and kernel wheel into OUTPUT_DIR/dist/ (faforge.release.build.pip): its kernel package "
        "given (--kernel-package), in OUTPUT_DIR, in --kernel-channel, or (`all`) built first as for conda; "
        "`--part wheel` is its plan job, `--part kernels` and the pieces build its kernel package as for a conda "
        "cell. No kernel TU is compiled for a wheel."
    ),
)


def owns(matrix: Matrix, key: str) -> bool:
    return find_cell([*matrix.cells, *matrix.pip_cells], key) is not None


def refusal(matrix: Matrix, key: str) -> str | None:
    """A cell or pip cell id the matrix lacks: why (the world has no such torch, CUDA, ...)."""
    if CELL_ID.fullmatch(key) or PIP_CELL_ID.fullmatch(key):
        return explain_missing(matrix.table, matrix.policy, key)
    return None


def example(matrix: Matrix) -> str:
    return "a cell id (e.g. linux-64/py312/torch2.7/cu129/abi1)"


jobs = cell_jobs
