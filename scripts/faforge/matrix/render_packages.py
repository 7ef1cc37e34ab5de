"""Renders of the packages keyed by (platform, CUDA, archs) rather than by a cell: the pip world's kernel
packages and FlashAttention-3's.

faforge.matrix.render renders a cell's flash-attn and its kernel output; these read a whole variant file and map
each rendered output back to its package by the CUDA and arch list it used.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.matrix import Fa3Package
from faforge.family import FLASH_ATTN_3
from faforge.matrix.cells import PipCell
from faforge.matrix.kernels import FLASH_ATTN_PACKAGE, KERNEL_PACKAGE, KernelKey, kernel_key
from faforge.matrix.render import RenderedCell, cell_key, render_platform, rendered_cell
from faforge.matrix.variants import fa3_variant_config_name, variant_config_path

if TYPE_CHECKING:
    from faforge.matrix import Matrix


def render_pip_kernels(cells: list[PipCell], recipe_path: Path, variants_dir: Path) -> dict[str, RenderedCell]:
    """{kernel key id: the recipe's kernel output}, for each kernel key of the pip cells, rendered from the
    cells' pip-world variant file (one combination per key: the output reads no python or torch field), each
    RenderedCell naming the key's first cell. The recipe skips flash-attn for a pip world (its glue is a
    wheel, not a conda package), so a flash-attn output here is an error."""
    out = {}
    for platform, world in sorted({(c.platform, c.world) for c in cells}):
        first: dict[KernelKey, PipCell] = {}
        for c in cells:
            if (c.platform, c.world) == (platform, world):
                first.setdefault(kernel_key(c), c)
        variant_file = variant_config_path(variants_dir, platform, world)
        by_used = {(c.cuda, c.cuda_archs, str(c.philox_offset_bits)): c for c in first.values()}
        for variant in render_platform(
            recipe_path, variant_file, platform, {cell_key(c.variant()) for c in first.values()}
        ):
            stage1 = variant.recipe
            recipe = stage1.to_dict()
            used = stage1.used_variant
            if recipe["package"]["name"] == FLASH_ATTN_PACKAGE:
                raise FaforgeError(
                    f"{recipe_path} renders a {FLASH_ATTN_PACKAGE} conda "
                    f"package for torch_world {world} ({variant_file.name})",
                    hint="a pip world's glue is a wheel: the recipe's "
                    f"{FLASH_ATTN_PACKAGE} output must skip torch_world {world}",
                )
            key = (
                str(used.get("cuda_compiler_version")),
                str(used.get("cuda_archs")),
                str(used.get("philox_offset_bits")),
            )
            if recipe["package"]["name"] == KERNEL_PACKAGE and key in by_used:
                cell = by_used[key]
                out[kernel_key(cell).id] = rendered_cell(cell, variant, recipe)
        missing = sorted(k.id for k in first if k.id not in out)
        if missing:
            raise FaforgeError(
                f"{recipe_path} renders no {KERNEL_PACKAGE} for {', '.join(missing)} from {variant_file.name}",
                hint="run `faforge generate` if variants/ is stale",
            )
    return out


def fa3_build_strings(matrix: Matrix, packages: list[Fa3Package]) -> dict[str, str]:
    """{FA3 package id: its build string}, from rattler-build's render of the generated FA3 variant files."""
    recipe = matrix.variants_dir.parent / FLASH_ATTN_3.recipe_dir / "recipe.yaml"
    wanted = {(p.platform, p.cuda, p.cuda_archs): p.id for p in packages}
    found = {}
    for platform, world in sorted({(p.platform, p.world) for p in packages}):
        for variant in render_platform(
            recipe, matrix.variants_dir / fa3_variant_config_name(platform, world), platform
        ):
            used = variant.recipe.used_variant
            key = (platform, str(used["cuda_compiler_version"]), str(used["cuda_archs"]))
            if key in wanted:
                found[wanted[key]] = variant.recipe.to_dict()["build"]["string"]
    missing = sorted(set(wanted.values()) - set(found))
    if missing:
        raise FaforgeError(
            f"{recipe} renders no {FLASH_ATTN_3.package} for {', '.join(missing)}", hint="run `faforge generate`"
        )
    return found
