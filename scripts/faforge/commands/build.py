"""Build cells through py-rattler-build, one log per cell, and print a summary table.

Cells already in the output dir are skipped (resumable); a failed cell does not stop the
others, and the exit status is 1 if any failed. Channels come from each cell's torch world
in variants/releases.yaml.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from faforge import progress
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError
from faforge.matrix import load_matrix
from faforge.matrix.cells import require_cells_exist
from faforge.matrix.render import render_cells
from faforge.release.build import PART_ENV, build_cell
from faforge.table import format_table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cells", nargs="*", metavar="CELL", help="cell ids as `faforge matrix` prints them")
    parser.add_argument("--plan", metavar="FILE", help="build the jobs of a `faforge plan --json` file, or of one of its chunks")
    parser.add_argument("--part", default="all", help="the piece of a split cell to build (a plan job's `part`); default: all")
    parser.add_argument("--output-dir", type=Path, default=Path("output"), help="where packages go (a channel folder); default: ./output")
    parser.add_argument("--log-dir", type=Path, help="one log per cell; default: OUTPUT_DIR/logs")


def jobs_from_plan(path: str) -> list[tuple[str, str]]:
    """(cell id, part) of every job in a plan file, a single chunk, or a single job."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise FaforgeError(f"--plan {path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise FaforgeError(f"--plan {path}: not JSON ({exc})", hint="write it with `faforge plan --json > FILE`") from None
    if isinstance(data, dict) and "build" in data:
        jobs = [job for chunk in data["build"] + data["link"] for job in chunk["include"]]
    elif isinstance(data, dict) and "include" in data:
        jobs = data["include"]
    else:
        jobs = [data]
    if not all(isinstance(j, dict) and "cell" in j for j in jobs):
        raise FaforgeError(f"--plan {path}: not a plan, a chunk or a job", hint="write it with `faforge plan --json > FILE`")
    return [(j["cell"], j.get("part", "all")) for j in jobs]


def execute(args: argparse.Namespace) -> int:
    wanted = [(c, args.part) for c in args.cells] + (jobs_from_plan(args.plan) if args.plan else [])
    if not wanted:
        raise FaforgeError("nothing to build", hint="name cells (see `faforge matrix`) or pass --plan FILE")
    parts = {part for _, part in wanted}
    if len(parts) > 1:
        raise FaforgeError(f"one run builds one part, got {', '.join(sorted(parts))}", hint="run one `faforge build` per part (as the CI jobs do)")
    # The recipe reads the part at render time (env.get), so it must be set before rendering.
    os.environ[PART_ENV] = parts.pop()
    matrix = load_matrix()
    require_cells_exist(matrix.cells, matrix.table, matrix.policy, [c for c, _ in wanted])
    ids = {c for c, _ in wanted}
    by_id = {r.cell.id: r for r in render_cells([c for c in matrix.cells if c.id in ids], matrix.recipe_path, matrix.variants_dir)}
    output_dir = args.output_dir.resolve()
    log_dir = (args.log_dir or output_dir / "logs").resolve()
    results = []
    for i, (cell_id, part) in enumerate(wanted, 1):
        title = f"[{i}/{len(wanted)}] {cell_id}" + ("" if part == "all" else f" [{part}]")
        with progress.step(title) as state:
            result = build_cell(by_id[cell_id], output_dir=output_dir, log_dir=log_dir, part=part,
                                live=lambda line, t=title: progress.say(f"  {t}: {line}"))
            state.failed = result.status == "failed"
        if state.failed:
            progress.warn(f"{cell_id} failed: {result.error}; log: {result.log}")
        results.append(result)
    rows = [[b.cell, b.part, b.status, f"{b.seconds:.1f}s", b.package.name if b.package else "-", b.log] for b in results]
    print(format_table(["cell", "part", "status", "time", "package", "log"], rows))
    failed = [b for b in results if b.status == "failed"]
    print(f"\n{len(results) - len(failed)} of {len(results)} ok" + (f", {len(failed)} failed" if failed else ""))
    return EXIT_PROBLEMS if failed else EXIT_OK
