"""List every cell of the build matrix (offline), with its build string and kernel package (`--json`
adds its channels, run requirements and constraints); `--kernels` lists the kernel packages instead,
each with its exact build (the one its cells pin, from their cached renders) and the cells that depend
on it; `--fa3` the FlashAttention-3 packages, each with the torch minors it serves."""

from __future__ import annotations

import argparse
import json
from collections import Counter

from faforge.errors import EXIT_OK
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.matrix import load_matrix
from faforge.matrix.kernels import KernelPackage, KernelPin
from faforge.matrix.releases import PLATFORMS
from faforge.matrix.render import RenderedCell, fa3_build_strings
from faforge.matrix.render_cache import selected_cells
from faforge.table import format_table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--platform", choices=[*PLATFORMS, "all"], default="all", help="default: all")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--kernels", action="store_true",
                       help=f"list the kernel packages ({FLASH_ATTN.kernel_package}, one per platform, CUDA, arch list and Philox offset width), "
                            "each with the exact build its cells pin, instead of the cells")
    which.add_argument("--fa3", action="store_true",
                       help=f"list the {FLASH_ATTN_3.package} packages (one per platform, CUDA and arch list) with the torch minors each "
                            "serves, instead of the cells")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of cells (schema: tests/schemas/matrix.json), or with --kernels of kernel packages "
                             "(tests/schemas/matrix-kernels.json), or with --fa3 of those packages (tests/schemas/matrix-fa3.json)")


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
        "kernel_package": {"id": kernels.key.id, "name": kernels.name, "version": kernels.version,
                           "build_string_prefix": kernels.key.build_string_prefix, "build_string": pin.build if pin else None},
    }


def kernels_by_cell(kernels: list[KernelPackage]) -> dict[str, KernelPackage]:
    return {cell_id: package for package in kernels for cell_id in package.cell_ids}


def exact_builds(kernels: list[KernelPackage], rendered: list[RenderedCell]) -> dict[str, KernelPin | None]:
    """{kernel package id: the build its cells pin}, read from the cells' renders (rattler-build alone knows the hash)."""
    return {k.key.id: k.exact_build(rendered) for k in kernels}


def print_kernels(matrix, platform: str, as_json: bool) -> int:
    kernels = [k for k in matrix.kernels if platform in ("all", k.key.platform)]
    pins = exact_builds(kernels, selected_cells(matrix, platform))
    if as_json:
        print(json.dumps([k.as_json(pins[k.key.id]) for k in kernels], indent=2))
        return EXIT_OK
    # No pin: a recipe whose flash-attn carries its kernels, so only the prefix is known (and nothing is built apart).
    rows = [[k.key.id, k.name, k.version, pins[k.key.id].build if pins[k.key.id] else k.key.build_string_prefix + "*", k.world,
             len(k.cell_ids)] for k in kernels]
    print(format_table(["kernel key", "package", "version", "build string", "source", "cells"], rows))
    print(f"\n{len(kernels)} kernel packages for {sum(len(k.cell_ids) for k in kernels)} cells")
    return EXIT_OK


def print_fa3(matrix, platform: str, as_json: bool) -> int:
    """Each FA3 package with its build string as rattler-build renders it from the generated variant file."""
    packages = [p for p in matrix.fa3 if platform in ("all", p.platform)]
    builds = fa3_build_strings(matrix, packages)
    records = [{**p.to_json(), "build_string": builds[p.id]} for p in packages]
    if as_json:
        print(json.dumps(records, indent=2))
        return EXIT_OK
    rows = [[r["id"], r["cuda"], r["cuda_archs"], r["build_string"], r["headers_torch"], ", ".join(r["served_torch_minors"])] for r in records]
    print(format_table(["package", "cuda", "archs", "build string", "headers", "serves torch"], rows))
    print(f"\n{len(records)} {FLASH_ATTN_3.package} packages, each serving python {records[0]['python'] if records else '-'} (limited API)")
    return EXIT_OK


def execute(args: argparse.Namespace) -> int:
    matrix = load_matrix()
    if args.fa3:
        return print_fa3(matrix, args.platform, args.json)
    if args.kernels:
        return print_kernels(matrix, args.platform, args.json)
    rendered = selected_cells(matrix, args.platform)
    by_cell = kernels_by_cell(matrix.kernels)
    if args.json:
        pins = exact_builds(matrix.kernels, rendered)
        print(json.dumps([cell_record(r, by_cell[r.cell.id], pins[by_cell[r.cell.id].key.id]) for r in rendered], indent=2))
        return EXIT_OK
    rows = [
        [r.cell.id, r.cell.torch, r.cell.cuda, r.cell.world, r.cell.cuda_archs, r.build_string, by_cell[r.cell.id].key.id]
        for r in rendered
    ]
    print(format_table(["cell", "torch", "cuda", "source", "archs", "build string", "kernel package"], rows))
    counts = Counter((r.cell.platform, r.cell.world) for r in rendered)
    summary = ", ".join(f"{platform} {world}: {n}" for (platform, world), n in sorted(counts.items()))
    print(f"\n{len(rendered)} cells ({summary})")
    return EXIT_OK
