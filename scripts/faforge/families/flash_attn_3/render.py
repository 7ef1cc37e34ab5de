"""FlashAttention-3's packages as its recipe renders them, from each platform's generated variant file: what the
plan names (build strings, files) and the build runs."""

from __future__ import annotations

from pathlib import Path

from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.matrix import Fa3Package, RenderedFa3, fa3_variant_config_name
from faforge.family import FLASH_ATTN_3
from faforge.matrix.render import render_platform

NAME = FLASH_ATTN_3.package


def recipe(variants_dir: Path) -> Path:
    """recipes/flash-attn-3/recipe.yaml of the checkout whose variants/ the matrix was read from."""
    return variants_dir.parent / FLASH_ATTN_3.recipe_dir / "recipe.yaml"


def render(packages: list[Fa3Package], recipe_path: Path, variants_dir: Path) -> list[RenderedFa3]:
    """Each package rendered from its platform's generated variant file (variants/flash-attn-3-<platform>-<world>.yaml),
    as `rattler-build build -m` that file would: matched by platform, CUDA and arch list."""
    out = {}
    for platform, world in sorted({(p.platform, p.world) for p in packages}):
        wanted = {(p.cuda, p.cuda_archs): p for p in packages if (p.platform, p.world) == (platform, world)}
        for variant in render_platform(recipe_path, variants_dir / fa3_variant_config_name(platform, world), platform):
            used = variant.recipe.used_variant
            package = wanted.get((str(used["cuda_compiler_version"]), str(used["cuda_archs"])))
            if package is not None:
                rendered = variant.recipe.to_dict()
                out[package.id] = RenderedFa3(
                    package=package, build_string=rendered["build"]["string"], recipe=rendered, variant=variant
                )
    missing = [p.id for p in packages if p.id not in out]
    if missing:
        raise FaforgeError(
            f"{recipe_path} renders no {NAME} for {', '.join(missing)}",
            hint="run `faforge generate` to refresh variants/, then check the recipe's skip rules",
        )
    return [out[p.id] for p in packages]
