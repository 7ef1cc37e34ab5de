"""List the build matrix (offline); the description `faforge matrix --help` prints is DESCRIPTION, with
the words of each family's own listing (faforge.matrix.stage.ListingOption) filled in."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from faforge.errors import EXIT_OK, FaforgeError
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix, load_matrix
from faforge.matrix.kernels import KernelPackage, KernelPin
from faforge.matrix.pip_builds import PipBuild, pip_builds, pip_kernel_pins
from faforge.matrix.releases import PLATFORMS
from faforge.matrix.render import RenderedCell
from faforge.matrix.render_cache import cached_render_cells, selected_cells
from faforge.matrix.stage import Listing, ListingOption
from faforge.pipindex.instructions import index_url
from faforge.table import format_table

DESCRIPTION = """List the build matrix (offline): its cells, or its {nouns} packages.

Each cell comes with its build string and kernel package (`--json` adds its channels, run requirements
and constraints); `--kernels` lists the kernel packages instead, each with its exact build (the one its
cells pin, from their cached renders) and the cells that depend on it{listings}.

`--world` picks the torch worlds: `pypi` lists the pip cells, each with its torch wheel, the URL of our index
for it (what a pip or uv user passes as --extra-index-url), its kernel package's exact build and its wheels as far
as the matrix decides them; `all` lists both, and with `--kernels` every kernel package once with the cells of
every world that pin it. Without `--world` the table lists every world, since it is the Quickstart's main job
and a pip user needs the pip cells' index URLs; `--json` and `--kernels` keep the conda worlds (conda-forge and
pytorch), as before the pip world."""


def describe(listings: Sequence[ListingOption]) -> str:
    """DESCRIPTION with each family listing's noun ('its kernel or X packages') and clause."""
    nouns = ["kernel", *(option.noun for option in listings)]
    joined = f"{', '.join(nouns[:-1])} or {nouns[-1]}" if len(nouns) > 1 else nouns[0]
    return DESCRIPTION.format(nouns=joined, listings="".join(f"; {option.description}" for option in listings))


# The families' own listings, each an option of the group beside --kernels, in the families' order.
LISTINGS = {family.spec.key: option for family in FAMILIES if (option := family.matrix.listing_option)}
__doc__ = describe(list(LISTINGS.values()))


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all", help="default: all")
    parser.add_argument(
        "--world",
        metavar="WORLD",
        help="the torch world whose cells to list: conda-forge, pytorch, pypi (PyPI's torch wheels) or all "
        "(default: all for the table; the conda worlds, conda-forge and pytorch, for --json and --kernels)",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--kernels",
        action="store_true",
        help=f"list the kernel packages ({FLASH_ATTN.kernel_package}, one "
        "per platform, CUDA, arch list and Philox offset width), "
        "each with the exact build its cells pin, instead of the cells",
    )
    for key, option in LISTINGS.items():
        which.add_argument(option.flag, action="store_true", dest=listing_dest(key), help=option.help)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of cells (schema: tests/schemas/matrix.json), or with --kernels of kernel packages "
        "(tests/schemas/matrix-kernels.json)" + "".join(f", or {option.json_help}" for option in LISTINGS.values()),
    )


def listing_dest(key: str) -> str:
    """The argparse destination of the listing option of the family whose key is `key`."""
    return f"list_{key}"


def cell_record(rendered: RenderedCell, kernels: KernelPackage, pin: KernelPin | None) -> dict:
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
        "philox_offset_bits": cell.philox_offset_bits,
        "build_string": rendered.build_string,
        "run_requirements": list(rendered.run_requirements),
        "run_constraints": list(rendered.run_constraints),
        "kernel_package": {
            "id": kernels.key.id,
            "name": kernels.name,
            "version": kernels.version,
            "build_string_prefix": kernels.key.build_string_prefix,
            "build_string": pin.build if pin else None,
        },
    }


def kernels_by_cell(kernels: list[KernelPackage]) -> dict[str, KernelPackage]:
    return {cell_id: package for package in kernels for cell_id in package.cell_ids}


def exact_builds(kernels: list[KernelPackage], rendered: list[RenderedCell]) -> dict[str, KernelPin | None]:
    """{kernel package id: the build its cells pin}, read from
    the cells' renders (rattler-build alone knows the hash)."""
    return {k.key.id: k.exact_build(rendered) for k in kernels}


ALL = "all"


def selected_worlds(matrix: Matrix, world: str | None) -> tuple[list[str], list[str]]:
    """(conda worlds, pip worlds) that `--world` names: by default the conda worlds."""
    conda, pip = list(matrix.table.worlds), list(matrix.table.pip_worlds)
    if world is None:
        return conda, []
    if world == ALL:
        return conda, pip
    if world in conda:
        return [world], []
    if world in pip:
        return [], [world]
    raise FaforgeError(
        f"--world {world}: no such torch world",
        input=world,
        hint=f"one of {', '.join([*conda, *pip, ALL])} (variants/releases.yaml `worlds`)",
    )


def selected_kernels(
    matrix: Matrix, platform: str, conda: list[str], pip: list[str]
) -> tuple[list[KernelPackage], dict[str, KernelPin | None]]:
    """The kernel packages the selected worlds' cells pin, each listing those cells, with each one's exact build."""
    cell_worlds = {**{c.id: c.world for c in matrix.cells}, **{c.id: c.world for c in matrix.pip_cells}}
    chosen = set(conda) | set(pip)
    kernels = []
    for k in matrix.all_kernels if pip else matrix.kernels:
        ids = tuple(i for i in k.cell_ids if cell_worlds[i] in chosen)
        if ids and platform in ("all", k.key.platform):
            kernels.append(k if ids == k.cell_ids else replace(k, cell_ids=ids))
    conda_ids = {c.id for c in matrix.cells}
    rendered = selected_cells(matrix, platform) if any(i in conda_ids for k in kernels for i in k.cell_ids) else []
    pins = exact_builds([k for k in kernels if k.world in matrix.table.worlds], rendered)
    if pip:
        pip_pins = pip_kernel_pins(
            matrix, [c for c in matrix.pip_cells if c.world in pip and platform in ("all", c.platform)]
        )
        pins |= {key: pin for key, pin in pip_pins.items() if pins.get(key) is None}
    return kernels, pins


def print_kernels(
    matrix: Matrix, platform: str, as_json: bool, conda: list[str] | None = None, pip: Sequence[str] = ()
) -> int:
    if conda is None and not pip:
        conda = list(matrix.table.worlds)
    kernels, pins = selected_kernels(matrix, platform, conda or [], list(pip))
    if as_json:
        print(json.dumps([k.as_json(pins[k.key.id]) for k in kernels], indent=2))
        return EXIT_OK
    # No pin: a recipe whose flash-attn carries its kernels, so only the prefix is known (and nothing is built apart).
    rows = [
        [
            k.key.id,
            k.name,
            k.version,
            pin.build if (pin := pins[k.key.id]) else k.key.build_string_prefix + "*",
            k.world,
            len(k.cell_ids),
        ]
        for k in kernels
    ]
    print(format_table(["kernel key", "package", "version", "build string", "source", "cells"], rows))
    summary = f"\n{len(kernels)} kernel packages for {sum(len(k.cell_ids) for k in kernels)} cells"
    if pip:
        own = [k for k in kernels if k.world in pip]
        summary += f" ({len(kernels) - len(own)} built in a conda world, {len(own)} in {' and '.join(pip)} only)"
    print(summary)
    return EXIT_OK


def print_listing(listing: Listing, as_json: bool) -> int:
    """A family's own listing (faforge.matrix.stage.FamilyRows.listing)."""
    if as_json:
        print(json.dumps(listing.records, indent=2))
        return EXIT_OK
    print(format_table(listing.header, listing.rows))
    print(f"\n{listing.summary}")
    return EXIT_OK


def print_pip_cells(builds: list[PipBuild]) -> None:
    """The pip cells, each with the index URL its pip and uv lines name ($FAFORGE_PIP_INDEX or the default base)."""
    rows = [
        [
            b.cell.id,
            b.cell.torch,
            b.cell.wheel,
            b.cell.cuda_archs,
            b.kernel_build + ("" if b.kernel_shared else " (own)"),
            index_url(b.cell.index_name),
            b.glue_wheel(),
        ]
        for b in builds
    ]
    print(
        format_table(["pip cell", "torch", "torch wheel", "archs", "kernel package", "index URL", "glue wheel"], rows)
    )
    counts = Counter((b.cell.platform, b.cell.world) for b in builds)
    summary = ", ".join(f"{platform} {world}: {n}" for (platform, world), n in sorted(counts.items()))
    keys = {b.kernel.key.id: b.kernel_shared for b in builds}
    print(
        f"\n{len(builds)} pip cells ({summary}); {len(keys)} kernel "
        f"packages: {sum(keys.values())} shared with a conda world's "
        f"cells, {len(keys) - sum(keys.values())} their own (`faforge "
        "matrix --kernels --world all`); the glue wheel's manylinux "
        "tag is decided from the built binary"
    )


def execute(args: argparse.Namespace) -> int:
    matrix = load_matrix(families=FAMILIES)
    conda, pip = selected_worlds(matrix, args.world)
    for family in matrix.families:
        if getattr(args, listing_dest(family.key), False):
            return print_listing(family.listing(args.platform, args.world), args.json)
    if args.kernels:
        return print_kernels(matrix, args.platform, args.json, conda, pip)
    if args.world is None and not args.json:
        pip = list(matrix.table.pip_worlds)  # the main job's table: what a pip or uv user needs too
    cells = [c for c in matrix.cells if c.world in conda and args.platform in ("all", c.platform)]
    rendered = cached_render_cells(cells, matrix.recipe_path, matrix.variants_dir) if cells else []
    builds = [b for world in pip for b in pip_builds(matrix, args.platform, world)]
    by_cell = kernels_by_cell(matrix.kernels)
    if args.json:
        pins = exact_builds(matrix.kernels, rendered) if rendered else {}
        print(
            json.dumps(
                [cell_record(r, by_cell[r.cell.id], pins[by_cell[r.cell.id].key.id]) for r in rendered]
                + [b.to_json() for b in builds],
                indent=2,
            )
        )
        return EXIT_OK
    if cells or not pip:
        rows = [
            [
                r.cell.id,
                r.cell.torch,
                r.cell.cuda,
                r.cell.world,
                r.cell.cuda_archs,
                r.build_string,
                by_cell[r.cell.id].key.id,
            ]
            for r in rendered
        ]
        print(format_table(["cell", "torch", "cuda", "source", "archs", "build string", "kernel package"], rows))
        counts = Counter((r.cell.platform, r.cell.world) for r in rendered)
        summary = ", ".join(f"{platform} {world}: {n}" for (platform, world), n in sorted(counts.items()))
        print(f"\n{len(rendered)} cells ({summary})")
    if pip:
        if cells:
            print()
        print_pip_cells(builds)
    return EXIT_OK
