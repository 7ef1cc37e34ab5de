"""render_platform renders each combination of a variant file alone (rattler-build's time for one config
grows with the square of its combinations). Proof that this changes nothing: every output of every
variant file, rendered that way, equals rattler-build's render of the whole file, computed here."""

from __future__ import annotations

import pytest
from rattler_build import JinjaConfig, PlatformConfig, RenderConfig, Stage0Recipe, VariantConfig

from faforge.matrix import load_matrix
from faforge.matrix.render import render_platform
from faforge.matrix.variants import variant_config_path


def whole_file_render(recipe_path, variant_file, platform: str) -> list:
    """The render `faforge matrix` used before: one config of every combination in the file."""
    variants = VariantConfig.from_file_with_context(
        variant_file, JinjaConfig(platform=PlatformConfig(target_platform=platform))
    )
    return Stage0Recipe.from_file(recipe_path).render(
        variants, RenderConfig(platform=PlatformConfig(target_platform=platform))
    )


def outputs(rendered: list) -> dict:
    """Each rendered output by package and used variant: its stage-1 recipe, hash and subpackage pins."""
    out = {}
    for variant in rendered:
        stage1 = variant.recipe
        recipe = stage1.to_dict()
        key = (recipe["package"]["name"], tuple(sorted((k, str(v)) for k, v in stage1.used_variant.items())))
        pins = {name: (pin.version, pin.build_string, pin.exact) for name, pin in variant.pin_subpackages.items()}
        out.setdefault(key, []).append((recipe, str(variant.hash_info.hash), pins))
    return out


@pytest.fixture(scope="module")
def matrix(repo):
    return load_matrix(repo)


@pytest.mark.parametrize(
    "platform, world", [("linux-64", "conda-forge"), ("linux-64", "pytorch"), ("linux-aarch64", "conda-forge")]
)
def test_one_combination_at_a_time_renders_what_the_whole_file_renders(matrix, platform, world):
    variant_file = variant_config_path(matrix.variants_dir, platform, world)
    expected = outputs(whole_file_render(matrix.recipe_path, variant_file, platform))
    got = outputs(render_platform(matrix.recipe_path, variant_file, platform))
    assert got.keys() == expected.keys()
    for key, renders in got.items():
        # The whole file renders a kernel output once per cell that shares it; one by one does the same.
        assert renders == expected[key], key
    assert len([c for c in matrix.cells if (c.platform, c.world) == (platform, world)]) == len(
        [key for key in got if key[0] == "flash-attn"]
    )


def test_only_the_cells_asked_for_are_rendered(matrix):
    cell = next(c for c in matrix.cells if c.id == "linux-64/py312/torch2.7/cu129/abi1")
    variant_file = variant_config_path(matrix.variants_dir, cell.platform, cell.world)
    key = (cell.variant()["python"], cell.torch, cell.cuda, str(cell.cxx11_abi))
    rendered = render_platform(matrix.recipe_path, variant_file, cell.platform, {key})
    names = sorted(v.recipe.to_dict()["package"]["name"] for v in rendered)
    assert names == ["flash-attn", "libflash-attn-kernels"]
    assert {str(v.recipe.used_variant["cuda_compiler_version"]) for v in rendered} == {cell.cuda}
    flash_attn = next(v for v in rendered if v.recipe.to_dict()["package"]["name"] == "flash-attn")
    assert str(flash_attn.recipe.used_variant["torch_version"]) == cell.torch
