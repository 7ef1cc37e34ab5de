"""The plain `rattler-build build` lines of the worlds page: one per variant file, each with its own world's channels.

Each documented line is parsed as rattler-build's CLI would read it, and the variant file it names
is rendered with the recipe through py-rattler-build (VariantConfig from that file for the line's
target platform, then Stage0Recipe.render), which must give exactly that world's cells of that
platform: no cell of the other world, none missing.
"""

from __future__ import annotations

import argparse
import re
import shlex

import pytest
import yaml

from faforge.matrix import load_matrix
from faforge.matrix.kernels import FLASH_ATTN_PACKAGE, KERNEL_PACKAGE
from faforge.matrix.render import render_platform
from faforge.matrix.variants import build_command, generated_files
from tests.support.docs import WORLDS, doc_text

BLOCK = re.compile(r"<!-- build: (?P<world>[\w-]+) -->\n```bash\n(?P<body>.*?)```", re.S)


def documented_builds(readme: str) -> list[tuple[str, argparse.Namespace]]:
    """(world the page files it under, parsed arguments) of every rattler-build line."""
    parser = argparse.ArgumentParser()
    parser.add_argument("-r", "--recipe")
    parser.add_argument("-m", "--variant-config")
    parser.add_argument("-c", "--channel", action="append", default=[])
    parser.add_argument("--target-platform", default="linux-64")
    out = []
    for block in BLOCK.finditer(readme):
        for line in block["body"].splitlines():
            words = shlex.split(line)
            assert words[:2] == ["rattler-build", "build"], f"not a plain build line: {line}"
            args = parser.parse_args(words[2:])
            assert args.variant_config, f"names no variant file (-m): {line}"
            out.append((block["world"], args))
    return out


def _key(values: dict) -> tuple:
    return (
        str(values["python"]),
        str(values["torch_version"]),
        str(values["cuda_compiler_version"]),
        str(values["cxx11_abi"]),
    )


@pytest.fixture(scope="module")
def builds(repo):
    return documented_builds(doc_text(WORLDS, repo))


def _worlds(matrix) -> dict:
    return {**matrix.table.worlds, **matrix.table.pip_worlds}


def test_every_variant_file_has_one_documented_build_with_its_worlds_channels(repo, builds):
    matrix = load_matrix(repo)
    # The pip world's files build only kernel packages; they count once the worlds page documents them.
    pip = matrix.pip_cells
    files = {f"variants/{path.name}" for path in generated_files(matrix.cells, matrix.variants_dir, pip_cells=pip)}
    assert sorted(args.variant_config for _, args in builds) == sorted(files)
    for world, args in builds:
        assert args.recipe == "recipes/flash-attn"
        assert tuple(args.channel) == _worlds(matrix)[world].channels, (world, args.channel)
        # The generated file's header names the same command.
        line = build_command(args.variant_config, args.target_platform, tuple(args.channel))
        assert f"#   {line}\n" in (repo / args.variant_config).read_text()


def test_each_documented_file_renders_to_exactly_its_worlds_cells(repo, builds):
    matrix = load_matrix(repo)
    for world, args in builds:
        path = repo / args.variant_config
        assert set(yaml.safe_load(path.read_text())["torch_world"]) == {world}
        if world in matrix.table.pip_worlds:
            # Only kernel packages: one per kernel key of the world's cells of that platform, no flash-attn.
            keys = {
                (c.cuda, c.cuda_archs, str(c.philox_offset_bits))
                for c in matrix.pip_cells
                if c.world == world and c.platform == args.target_platform
            }
            first = {
                (c.cuda, c.cuda_archs, str(c.philox_offset_bits)): c
                for c in reversed(matrix.pip_cells)
                if c.platform == args.target_platform
            }
            rendered = render_platform(
                matrix.recipe_path, path, args.target_platform, {_key(c.variant()) for c in first.values()}
            )
            assert {v.recipe.to_dict()["package"]["name"] for v in rendered} == {KERNEL_PACKAGE}
            assert {
                (
                    str(v.recipe.used_variant["cuda_compiler_version"]),
                    str(v.recipe.used_variant["cuda_archs"]),
                    str(v.recipe.used_variant["philox_offset_bits"]),
                )
                for v in rendered
            } == keys
            continue
        want = {_key(c.variant()) for c in matrix.cells if c.world == world and c.platform == args.target_platform}
        assert want, (world, args.target_platform)
        rendered = render_platform(matrix.recipe_path, path, args.target_platform)
        # the flash-attn output's variants: one per cell (the kernel output's are per kernel build)
        got = [v.recipe.used_variant for v in rendered if v.recipe.to_dict()["package"]["name"] == FLASH_ATTN_PACKAGE]
        assert {str(v["torch_world"]) for v in got} == {world}
        assert sorted(_key(v) for v in got) == sorted(want), args.variant_config


def test_the_parser_rejects_a_line_without_a_variant_file():
    """Control: a line naming no -m file is not taken for a build of some variant file."""
    with pytest.raises(AssertionError, match="names no variant file"):
        documented_builds(
            "<!-- build: conda-forge -->\n```bash\nrattler-build build -r recipes/flash-attn -c conda-forge\n```\n"
        )
