"""Regenerate the variant configs under variants/ from releases.yaml and matrix.yaml."""

from __future__ import annotations

import argparse
import sys

from faforge.errors import EXIT_OK, EXIT_PROBLEMS
from faforge.matrix import load_matrix
from faforge.matrix.variants import generated_files, obsolete_files, stale_files


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale or obsolete")


def execute(args: argparse.Namespace) -> int:
    matrix = load_matrix()
    expected = generated_files(matrix.cells, matrix.variants_dir)
    stale = stale_files(expected)
    obsolete = obsolete_files(matrix.variants_dir, expected)
    if args.check:
        for path in stale:
            print(f"stale: {path} (run `faforge generate`)", file=sys.stderr)
        for path in obsolete:
            print(f"obsolete: {path} is generated but no longer produced (run `faforge generate` to remove it)", file=sys.stderr)
        if stale or obsolete:
            return EXIT_PROBLEMS
        print("variant configs are up to date")
        return EXIT_OK
    for path in stale:
        path.write_text(expected[path])
        print(f"wrote {path}")
    for path in obsolete:
        path.unlink()
        print(f"removed {path}")
    if not stale and not obsolete:
        print("variant configs are up to date")
    return EXIT_OK
