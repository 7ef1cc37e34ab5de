"""Find torch releases missing from variants/releases.yaml by reading a world's channel repodata.

Shows the new release rows and the cells they add. With --write, adds the rows to the table
(in its canonical form) and regenerates the variant configs; an unreachable channel is an
error and leaves every file as it was. Pip sources (torch-sources.yaml `pip_sources`: PyPI, PyTorch's
per-CUDA indexes) add a pip world's rows, each read from its wheels (CUDA, C++ ABI, pythons).
Wheel indexes (`wheel_indexes`) add no rows: they list torch minors that exist as wheels before any
conda world has them. A family whose releases are data (its module's bump.proposals) is a source too, named by
its package: its new upstream releases are shown with the rows proposed for its data file (--gate gates them here).
A new torch minor gets its variants/kernel-abi.yaml row measured from its PyPI wheel
(faforge.kernels.measure_abi); a layout no kernel library has stops the bump (exit 1) with nothing written.
"""

from __future__ import annotations

import argparse
import json

from faforge import atomic, config, paths
from faforge.channel.repodata import channel_url
from faforge.errors import EXIT_OK, FaforgeError
from faforge.families.registry import FAMILIES
from faforge.kernels.kernel_abi import dump_row
from faforge.matrix import load_matrix
from faforge.matrix.releases import PipRelease
from faforge.release.bump.pip import find_new_pip, load_pip_sources
from faforge.release.bump.releases import (
    Proposal,
    extended,
    find_new,
    load_sources,
    measured_rows,
    new_cells,
    new_pip_cells,
    with_rows,
    write,
)
from faforge.release.bump.torch_wheels import ahead_of_table, load_wheel_indexes, read_index, wheel_releases
from faforge.table import format_table

BUMP_VERSION = 1


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        action="append",
        metavar="NAME",
        help="a source, pip source or wheel index from variants/torch-sources.yaml, or a family's package "
        "(its upstream releases) (repeatable; default: all of them)",
    )
    parser.add_argument(
        "--channel-url",
        metavar="URL",
        help="read this channel (or pip source's index root, or wheel "
        "index, or family's PyPI JSON API root) instead of the source's (a mirror); needs one --source",
    )
    parser.add_argument(
        "--write", action="store_true", help="add the rows to releases.yaml and regenerate the variant configs"
    )
    parser.add_argument(
        "--gate",
        action="store_true",
        help="gate the rows proposed for a family's new releases on this machine (a clean venv with torch: slow)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the versioned result (schema: tests/schemas/bump.json)"
    )


def execute(args: argparse.Namespace) -> int:
    sources_file = paths.variants_dir() / "torch-sources.yaml"
    sources, wheel_indexes = load_sources(sources_file), load_wheel_indexes(sources_file)
    pip_sources = load_pip_sources(sources_file)
    families = {f.spec.package: f for f in FAMILIES}
    names = args.source or [*sources, *pip_sources, *wheel_indexes, *families]
    unknown = [n for n in names if n not in {**sources, **pip_sources, **wheel_indexes, **families}]
    if unknown:
        raise FaforgeError(
            f"--source {unknown[0]}: unknown",
            hint=f"sources in variants/torch-sources.yaml: {', '.join([*sources, *pip_sources, *wheel_indexes])}; "
            f"families: {', '.join(families)}",
        )
    if args.channel_url is not None and not args.channel_url.strip():
        raise FaforgeError(
            "--channel-url is empty", hint="pass the mirror's URL, or leave --channel-url out to read the source's own"
        )
    if args.channel_url and len(names) != 1:
        raise FaforgeError("--channel-url replaces one source's channel", hint="pass exactly one --source with it")
    if (
        args.channel_url
        and names[0] in {**pip_sources, **families}
        and not args.channel_url.startswith(("http://", "https://"))
    ):
        raise FaforgeError(
            f"--channel-url {args.channel_url}: a pip source's index is read over http(s)",
            hint="serve the mirror's simple pages over http(s) and pass its root (the URL before /torch/)",
        )
    if args.channel_url and args.write and names[0] in sources and channel_url(args.channel_url).startswith("file://"):
        # Each new row's `source` is the URL the build was read from: a local folder's would cite this machine.
        raise FaforgeError(
            f"--channel-url {args.channel_url}: a local channel, so --write would record its file:// paths "
            "as the new rows' `source` in releases.yaml",
            hint="serve the mirror over http(s) and pass that URL, or leave out --write to see what it has",
        )
    matrix = load_matrix()
    rows = []
    for name in names:
        if name in sources:
            rows += find_new(matrix.table, sources[name], args.channel_url)
    pip_rows: list[PipRelease] = []
    for name in names:
        if name in pip_sources:
            # Each source sees the rows of those before it: PyPI's release is not proposed again from a per-CUDA index.
            pip_rows += find_new_pip(
                extended(matrix.table, rows, pip_rows),
                matrix.policy,
                pip_sources[name],
                config.cache_dir() / "torch-wheels",
                args.channel_url,
            )
    table = extended(matrix.table, rows, pip_rows)
    # Read every source before anything is written: an unreachable index leaves the table as it was.
    wheel_only = []
    for name in names:
        if name in wheel_indexes:
            wheel_only += ahead_of_table(table, wheel_releases(read_index(args.channel_url or wheel_indexes[name])))
    proposals: list[Proposal] = []
    for name in names:
        if name in families:
            found = families[name].bump.proposals(args.channel_url, args.gate)
            proposals += [found] if found is not None else []
    verdicts = measured_rows([*rows, *pip_rows], matrix.philox, matrix.policy, config.cache_dir())
    philox = with_rows(matrix.philox, verdicts)
    cells = new_cells(matrix.table, table, matrix.policy, philox)
    pip_cells = new_pip_cells(matrix.table, table, matrix.policy, philox)
    written = (
        write(table, matrix.policy, philox, matrix.variants_dir, matrix.recipe_path, FAMILIES, verdicts)
        if args.write and (rows or pip_rows)
        else []
    )
    for proposal in proposals if args.write else ():
        if proposal.releases:
            atomic.write_text(proposal.path, proposal.text)
            written.append(proposal.path)
    if args.json:
        print(
            json.dumps(
                {
                    "version": BUMP_VERSION,
                    "sources": names,
                    "new_releases": [
                        {
                            "world": r.world,
                            "torch": r.torch,
                            "cuda": r.cuda,
                            "python": list(r.python),
                            "platforms": list(r.platforms),
                            "tegra": r.tegra,
                            "source": list(r.source),
                        }
                        for r in rows
                    ]
                    + [
                        {
                            "world": r.world,
                            "torch": r.torch,
                            "cuda": r.cuda,
                            "python": list(r.python),
                            "platforms": list(r.platforms),
                            "tegra": False,
                            "source": list(r.source),
                            "cxx11_abi": r.cxx11_abi,
                            "index": table.index_of(r),
                        }
                        for r in pip_rows
                    ],
                    "new_cells": [c.id for c in cells],
                    "new_pip_cells": [c.id for c in pip_cells],
                    "kernel_abi": [
                        {
                            "minor": v.minor,
                            "torch": v.torch,
                            "wheel": v.wheel,
                            "sha256": v.sha256,
                            "source": v.source,
                            "offset_intragraph": v.offset_intragraph,
                            "verdict": v.verdict,
                        }
                        for v in verdicts
                    ],
                    "written": [str(p) for p in written],
                    "family_releases": [
                        {
                            "family": p.family,
                            "releases": list(p.releases),
                            "skipped": list(p.skipped),
                            "rows": p.data,
                        }
                        for p in proposals
                    ],
                    "wheel_only": [
                        {
                            "torch": w.torch,
                            "cuda": list(w.cuda),
                            "python": list(w.python),
                            "platforms": list(w.platforms),
                        }
                        for w in wheel_only
                    ],
                },
                indent=2,
            )
        )
        return EXIT_OK
    if wheel_only:
        print("torch releases with wheels that no conda world has yet (no rows until a channel builds them):")
        print(
            format_table(
                ["torch", "cuda", "python", "platforms"],
                [[w.torch, " ".join(w.cuda), " ".join(w.python), " ".join(w.platforms)] for w in wheel_only],
            )
            + "\n"
        )
    for proposal in proposals:
        _print_proposal(proposal, args.write)
    if all(name in families for name in names):
        return EXIT_OK
    if not rows and not pip_rows:
        print(f"no torch releases missing from {matrix.table.path.name} ({', '.join(names)})")
        return EXIT_OK
    if rows:
        print(
            format_table(
                ["world", "torch", "cuda", "python", "platforms", "tegra"],
                [
                    [r.world, r.torch, r.cuda, " ".join(r.python), " ".join(r.platforms), "yes" if r.tegra else "no"]
                    for r in rows
                ],
            )
        )
    if pip_rows:
        print(
            ("\n" if rows else "")
            + format_table(
                ["world", "torch", "cuda", "abi", "python", "platforms", "index"],
                [
                    [
                        r.world,
                        r.torch,
                        r.cuda,
                        str(r.cxx11_abi),
                        " ".join(r.python),
                        " ".join(r.platforms),
                        table.index_of(r),
                    ]
                    for r in pip_rows
                ],
            )
        )
    for verdict in verdicts:
        print(
            f"\nmeasured {matrix.philox.path.name} row for torch {verdict.minor} (from {verdict.source}):\n"
            + dump_row(verdict).rstrip()
        )
    print(f"\n{len(cells) + len(pip_cells)} new cells:")
    for cell in [*cells, *pip_cells]:
        print(f"  {cell.id}")
    if written:
        print("\nwrote " + ", ".join(str(p) for p in written))
    else:
        print("\nrun with --write to add them to the table and regenerate the variant configs")
    return EXIT_OK


def _print_proposal(proposal: Proposal, wrote: bool) -> None:
    for line in proposal.skipped:
        print(f"{proposal.family}: skipped {line}")
    if not proposal.releases:
        print(f"no {proposal.family} releases missing from {proposal.path.name}\n")
        return
    done = f"added to {proposal.path}" if wrote else f"run with --write to add them to {proposal.path.name}"
    print(f"{proposal.family} {', '.join(proposal.releases)}: proposed rows ({done}):\n{proposal.rows}")
