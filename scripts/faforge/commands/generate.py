"""Regenerate the variant configs and render store under variants/; with --check, only report stale ones.

The variant configs come from releases.yaml and matrix.yaml, the render store (variants/renders/) from
them and the recipe: the conda worlds' and, for the pip world,
variants/<platform>-pypi.yaml with the kernel renders of its cells' kernel keys."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from faforge.errors import EXIT_OK, EXIT_PROBLEMS
from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from faforge.matrix.render_store import obsolete_store_files, store_files
from faforge.matrix.variants import generated_files, obsolete_files, stale_files


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a generated file is stale or obsolete"
    )


def execute(args: argparse.Namespace) -> int:
    matrix = load_matrix(families=FAMILIES)
    # Each family with packages of its own adds its variant files (faforge.matrix.stage.FamilyRows).
    expected = generated_files(matrix.cells, matrix.variants_dir, matrix.families, matrix.pip_cells)
    stale = stale_files(expected)
    obsolete = obsolete_files(matrix.variants_dir, expected)
    if not args.check:
        _apply(expected, stale, obsolete)
    # The store's key covers the variant files, so it is judged after they are written.
    store = store_files(matrix.cells, matrix.recipe_path, matrix.variants_dir, matrix.pip_cells)
    stale_store = stale_files(store)
    obsolete_store = obsolete_store_files(matrix.variants_dir, store)
    if args.check:
        for path in [*stale, *stale_store]:
            print(f"stale: {path} (run `faforge generate`)", file=sys.stderr)
        for path in [*obsolete, *obsolete_store]:
            print(
                f"obsolete: {path} is generated but no longer produced (run `faforge generate` to remove it)",
                file=sys.stderr,
            )
        if stale or obsolete or stale_store or obsolete_store:
            return EXIT_PROBLEMS
        print("generated files are up to date")
        return EXIT_OK
    _apply(store, stale_store, obsolete_store)
    if not (stale or obsolete or stale_store or obsolete_store):
        print("generated files are up to date")
    return EXIT_OK


def _apply(expected: Mapping[Path, str], stale: Iterable[Path], obsolete: Iterable[Path]) -> None:
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected[path])
        print(f"wrote {path}")
    for path in obsolete:
        path.unlink()
        print(f"removed {path}")
