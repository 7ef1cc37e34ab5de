"""Renders of the packages that are not a cell's: the pip world's kernel packages, keyed by (platform, CUDA,
archs), and each family's own packages (faforge.matrix.stage).

faforge.matrix.render renders a cell's flash-attn and its kernel output; these read a whole variant file and map
each rendered output back to its package: a kernel package by the CUDA and arch list it used, a family's
package by the combination it was rendered from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from faforge.errors import FaforgeError
from faforge.matrix.cells import PipCell
from faforge.matrix.kernels import FLASH_ATTN_PACKAGE, KERNEL_PACKAGE, KernelKey, kernel_key
from faforge.matrix.render import RenderedCell, cell_key, render_combinations, render_platform, rendered_cell
from faforge.matrix.variants import variant_config_path

if TYPE_CHECKING:
    from faforge.matrix.stage import MatrixPackage


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


P = TypeVar("P", bound="MatrixPackage")


@dataclass(frozen=True)
class RenderedPackage(Generic[P]):
    """A family's package (faforge.matrix.stage.MatrixPackage) as rattler-build renders it from its
    generated variant file."""

    package: P
    build_string: str
    recipe: dict
    # py-rattler-build's RenderedVariant, which `faforge build` runs.
    variant: object = field(default=None, compare=False, repr=False)

    @property
    def cell(self) -> P:
        """What is built, as faforge.release.build.steps reads a RenderedCell's cell: id, platform, cuda, channels."""
        return self.package

    @property
    def name(self) -> str:
        return self.recipe["package"]["name"]

    @property
    def version(self) -> str:
        return str(self.recipe["package"]["version"])

    def to_json(self) -> dict:
        return {
            "id": self.package.id,
            "name": self.name,
            "version": self.version,
            "build_string": self.build_string,
            **self.package.rendered_json(),
        }


def render_family_packages(
    packages: Sequence[P], recipe_path: Path, name: str, variant_file: Callable[[str, str], Path]
) -> list[RenderedPackage[P]]:
    """Each package's output `name`, rendered from the variant file `variant_file(platform, world)` of its
    platform and world as `rattler-build build -m` that file would, in the order of `packages`: a
    combination of the file is the package whose variant() it holds (the file zips one per package)."""
    out: dict[str, RenderedPackage[P]] = {}
    for platform, world in sorted({(p.platform, p.world) for p in packages}):
        own = [p for p in packages if (p.platform, p.world) == (platform, world)]
        for combination, variant in render_combinations(recipe_path, variant_file(platform, world), platform):
            recipe = variant.recipe.to_dict()
            held = (p for p in own if all(str(combination.get(k)) == v for k, v in p.variant().items()))
            package = next(held, None)
            if package is not None and recipe["package"]["name"] == name:
                out[package.id] = RenderedPackage(
                    package=package, build_string=recipe["build"]["string"], recipe=recipe, variant=variant
                )
    missing = [p.id for p in packages if p.id not in out]
    if missing:
        raise FaforgeError(
            f"{recipe_path} renders no {name} for {', '.join(missing)}",
            hint="run `faforge generate` to refresh variants/, then check the recipe's skip rules",
        )
    return [out[p.id] for p in packages]
