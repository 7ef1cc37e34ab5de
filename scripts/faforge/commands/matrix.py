"""List every cell of the build matrix (offline), with its build string and run requirements."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from faforge.errors import EXIT_OK
from faforge.matrix import load_matrix
from faforge.matrix.releases import PLATFORMS
from faforge.matrix.render import RenderedCell, render_cells
from faforge.table import format_table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all", help="default: all")
    parser.add_argument("--json", action="store_true", help="print a JSON list of cells (schema: tests/schemas/matrix.json)")


def cell_record(rendered: RenderedCell) -> dict:
    cell = rendered.cell
    return {
        "id": cell.id,
        "platform": cell.platform,
        "python": cell.python,
        "torch": cell.torch,
        "torch_minor": cell.torch_minor,
        "cuda": cell.cuda,
        "cxx11_abi": cell.cxx11_abi,
        "torch_source": cell.world,
        "channels": list(cell.channels),
        "cuda_archs": cell.cuda_archs,
        "build_string": rendered.build_string,
        "run_requirements": list(rendered.run_requirements),
        "run_constraints": list(rendered.run_constraints),
    }


def selected_cells(platform: str) -> list[RenderedCell]:
    matrix = load_matrix()
    cells = [c for c in matrix.cells if platform in ("all", c.platform)]
    return render_cells(cells, matrix.recipe_path, matrix.variants_dir)


def execute(args: argparse.Namespace) -> int:
    rendered = selected_cells(args.platform)
    if args.json:
        print(json.dumps([cell_record(r) for r in rendered], indent=2))
        return EXIT_OK
    rows = [
        [r.cell.id, r.cell.torch, r.cell.cuda, r.cell.world, r.cell.cuda_archs, r.build_string]
        for r in rendered
    ]
    print(format_table(["cell", "torch", "cuda", "source", "archs", "build string"], rows))
    counts = Counter((r.cell.platform, r.cell.world) for r in rendered)
    summary = ", ".join(f"{platform} {world}: {n}" for (platform, world), n in sorted(counts.items()))
    print(f"\n{len(rendered)} cells ({summary})")
    return EXIT_OK
