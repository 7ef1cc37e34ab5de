"""Show the rendered recipe for one cell (by build string or cell id)."""

from __future__ import annotations

import argparse
import difflib
import json
import re
from typing import TYPE_CHECKING, cast

import yaml

from faforge.errors import EXIT_OK, FaforgeError
from faforge.matrix import load_matrix
from faforge.matrix.cells import CELL_ID, find_cell
from faforge.matrix.missing_cells import explain_missing
from faforge.matrix.render import RenderedCell, build_string_head, render_cells
from faforge.matrix.render_cache import cached_render_cells

if TYPE_CHECKING:
    from rattler_build import RenderedVariant


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cell", metavar="CELL", help="a build string or cell id exactly as `faforge matrix` prints it")
    parser.add_argument("--json", action="store_true", help="print the rendered recipe as JSON instead of YAML")


def execute(args: argparse.Namespace) -> int:
    matrix = load_matrix()
    # Only the cell asked for is rendered for real; a build string is looked up in every cell's (cached) render.
    cell = find_cell(matrix.cells, args.cell)
    every_cell = [] if cell else cached_render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir)
    cell = cell or next((r.cell for r in every_cell if r.build_string == args.cell), None)
    for r in render_cells([cell], matrix.recipe_path, matrix.variants_dir) if cell else []:
        if args.cell in (r.cell.id, r.build_string):
            variant = cast("RenderedVariant", r.variant)  # typed `object` in faforge.matrix.render
            recipe = with_test_scripts_filled(r.recipe, variant.recipe.used_variant)
            print(json.dumps(recipe, indent=2) if args.json else yaml.safe_dump(recipe, sort_keys=False), end="")
            return EXIT_OK
    nearest = nearest_cells(args.cell, every_cell)
    reason = (
        explain_missing(matrix.table, matrix.policy, args.cell)
        if CELL_ID.fullmatch(args.cell)
        else f"unknown cell {args.cell!r}"
    )
    raise FaforgeError(
        reason, hint=("nearest cells: " + ", ".join(nearest)) if nearest else "`faforge matrix` lists every cell"
    )


def nearest_cells(given: str, rendered: list[RenderedCell], n: int = 3) -> list[str]:
    """Every cell whose build string differs only in hash and build number (one per platform), then the closest names.

    A build string from an older recipe has another hash; its own cell must never be left out."""
    same = [
        f"{r.build_string} ({r.cell.id})"
        for r in rendered
        if build_string_head(r.build_string) == build_string_head(given)
    ]
    if same:
        return same
    names = [r.cell.id for r in rendered] + [r.build_string for r in rendered]
    return difflib.get_close_matches(given, names, n=n, cutoff=0.5)


# A plain variable reference in a recipe string, such as `${{ cxx11_abi }}`.
JINJA_VARIABLE = re.compile(r"\$\{\{\s*(\w+)\s*\}\}")


def with_test_scripts_filled(recipe: dict, used_variant: dict) -> dict:
    """The rendered recipe with its `tests:` scripts' variables filled from the cell's used variant.

    rattler-build renders test scripts only when it runs them, so its stage-1 recipe still holds
    `${{ cxx11_abi }}`; the values are the ones that run gets, from the same render."""

    def fill(text):
        if not isinstance(text, str):
            return text
        return JINJA_VARIABLE.sub(lambda m: str(used_variant[m[1]]) if m[1] in used_variant else m[0], text)

    tests = []
    for test in recipe.get("tests", []):
        if "script" in test:
            script = test["script"]
            test = {**test, "script": [fill(line) for line in script] if isinstance(script, list) else fill(script)}
        tests.append(test)
    return {**recipe, "tests": tests} if "tests" in recipe else recipe
