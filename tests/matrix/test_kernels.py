"""Kernel packages from the real matrix: one per (platform, CUDA, archs, Philox layout), every cell in
exactly one, and no kernel key in two torch worlds (the rule in faforge.matrix.kernels)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from faforge.errors import DataError, FaforgeError
from faforge.kernels.kernel_abi import load_kernel_abi
from faforge.matrix import load_matrix
from faforge.matrix.kernels import KERNEL_PACKAGE, KernelKey, kernel_key
from faforge.matrix.render import render_kernel_output, render_platform
from faforge.matrix.render_cache import selected_cells
from faforge.matrix.variants import variant_config_path
from tests.support.tiny_recipe import TINY_SPLIT_RECIPE


@pytest.fixture(scope="module")
def matrix(repo):
    return load_matrix(repo)


def test_one_kernel_package_per_platform_cuda_archs_and_philox_layout(matrix):
    keys = {(c.platform, c.cuda, c.cuda_archs, c.philox_offset_bits) for c in matrix.cells}
    assert len(matrix.kernels) == len(keys) == 12, (
        "the split build: 10 (platform, CUDA, archs), cu129 twice on both platforms"
    )
    assert sorted(c for k in matrix.kernels for c in k.cell_ids) == sorted(c.id for c in matrix.cells), (
        "every cell in exactly one"
    )
    cells = {c.id: c for c in matrix.cells}
    for package in matrix.kernels:
        assert package.name == KERNEL_PACKAGE and package.version == matrix.policy.flash_attn_version
        users = [cells[i] for i in package.cell_ids]
        assert {kernel_key(c) for c in users} == {package.key}
        assert {c.world for c in users} == {package.world}
    shared = max(matrix.kernels, key=lambda k: len(k.cell_ids))
    assert len({cells[i].torch_minor for i in shared.cell_ids}) > 1, "one kernel package serves several torch minors"


def test_cu129_cells_of_torch_2_9_and_2_10_need_different_kernel_builds(matrix):
    """torch <= 2.9 has a uint32_t at::PhiloxCudaState::offset_intragraph_ (24 bytes), 2.10 on a uint64_t
    one (32 bytes; pytorch/pytorch#164515): no one kernel library serves both, though CUDA and archs agree."""
    cells = {c.id: c for c in matrix.cells}
    old, new = cells["linux-64/py312/torch2.9/cu129/abi1"], cells["linux-64/py312/torch2.10/cu129/abi1"]
    assert (old.cuda, old.cuda_archs) == (new.cuda, new.cuda_archs)
    assert (old.philox_offset_bits, new.philox_offset_bits) == (32, 64)
    assert kernel_key(old) != kernel_key(new)
    assert kernel_key(old).id == "linux-64/cu129/sm80_90_100_120ptx/philox32"
    assert kernel_key(new).slug == "kernels-linux-64-cu129-sm80_90_100_120ptx-philox64"
    assert kernel_key(new).build_string_prefix == "cu129_sm80_90_100_120ptx_philox64_h"


def test_every_cells_philox_width_is_its_torch_minors_row_in_kernel_abi_yaml(matrix):
    verdicts = load_kernel_abi(matrix.variants_dir / "kernel-abi.yaml")
    for cell in matrix.cells:
        expected = {"uint32_t": 32, "uint64_t": 64}[verdicts[cell.torch_minor].offset_intragraph]
        assert cell.philox_offset_bits == expected, cell.id
        assert cell.variant()["philox_offset_bits"] == str(expected), cell.id


def test_a_matrix_torch_minor_without_a_kernel_abi_row_is_refused(repo_copy):
    path = repo_copy / "variants" / "kernel-abi.yaml"
    text = path.read_text()
    path.write_text(text[: text.index("- minor: '2.13'")])
    with pytest.raises(DataError) as caught:
        load_matrix(repo_copy)
    assert caught.value.path == path
    assert "torch minor 2.13" in str(caught.value)
    assert "offset_intragraph" in caught.value.hint and "faforge bump --write` measures the row" in caught.value.hint


def test_build_string_prefix_follows_the_recipe_convention(matrix):
    by_id = {k.key.id: k for k in matrix.kernels}
    cu130 = by_id["linux-64/cu130/sm80_90_100_120ptx/philox64"]
    assert cu130.key.build_string_prefix == "cu130_sm80_90_100_120ptx_philox64_h"
    assert cu130.build_string_matches("cu130_sm80_90_100_120ptx_philox64_h1a2b3c4_0")
    assert not cu130.build_string_matches("cu130_sm80_90_100_120ptx_philox64_h1a2b3c4_1"), (
        "another build number is another build"
    )
    assert not cu130.build_string_matches("cu130_sm80_90_100_120ptx_philox32_h1a2b3c4_0"), (
        "another layout is another build"
    )
    assert not cu130.build_string_matches("cu129_sm80_90_100_120ptx_philox64_h1a2b3c4_0")
    assert by_id["linux-64/cu121/sm80_90ptx/philox32"].key.build_string_prefix == "cu121_sm80_90ptx_philox32_h"


def _variant_file_keys(path) -> set[tuple[str, str, str]]:
    data = yaml.safe_load(path.read_text())
    return set(zip(data["cuda_compiler_version"], data["cuda_archs"], data["philox_offset_bits"], strict=True))


def test_the_two_linux_64_torch_worlds_share_no_kernel_key(repo):
    """Read from the generated variant files that rattler-build renders: the conda-forge world builds
    CUDA 12.0/12.6/12.9/13.0, the legacy pytorch world 12.1/12.4, so no (CUDA, archs) is built twice."""
    conda_forge = _variant_file_keys(repo / "variants" / "linux-64-conda-forge.yaml")
    pytorch = _variant_file_keys(repo / "variants" / "linux-64-pytorch.yaml")
    assert conda_forge and pytorch
    assert conda_forge.isdisjoint(pytorch), conda_forge & pytorch


def test_a_kernel_key_in_two_worlds_is_refused(repo, tmp_path):
    """A conda-forge torch built with CUDA 12.4, which the pytorch world also builds, would make two
    different libflash-attn-kernels files with one name, version and build string: refused on load."""
    root = tmp_path / "repo"
    shutil.copytree(repo / "variants", root / "variants")
    releases = root / "variants" / "releases.yaml"
    text = releases.read_text()
    row = (
        "- world: conda-forge\n  torch: 2.5.1\n  cuda: '12.4'\n  python: ['3.10', '3.11', '3.12']\n"
        "  platforms: [linux-64]\n  source: a test's made-up row\n"
    )
    releases.write_text(text.replace("releases:\n", "releases:\n" + row, 1))
    with pytest.raises(DataError) as caught:
        load_matrix(root)
    message = str(caught.value)
    assert "releases.yaml" in message and "linux-64/cu124/sm80_90ptx/philox32" in message
    assert "conda-forge and pytorch" in message and "cu124_sm80_90ptx_philox32_h" in message


def rendered_kernel_builds(recipe: Path, variants_dir: Path, platform: str, world: str) -> dict[KernelKey, set[str]]:
    """Build strings of the recipe's libflash-attn-kernels output per kernel key, as rattler-build renders
    the variant file of one platform and world."""
    out: dict[KernelKey, set[str]] = {}
    for variant in render_platform(recipe, variant_config_path(variants_dir, platform, world), platform):
        stage1 = variant.recipe
        recipe_dict = stage1.to_dict()
        if recipe_dict["package"]["name"] == KERNEL_PACKAGE:
            used = stage1.used_variant
            key = KernelKey(
                platform, str(used["cuda_compiler_version"]), str(used["cuda_archs"]), int(used["philox_offset_bits"])
            )
            out.setdefault(key, set()).add(recipe_dict["build"]["string"])
    return out


def test_a_split_recipe_renders_one_kernel_build_per_key_from_the_real_variant_files(matrix, tmp_path):
    """The stand-in split recipe (tests/support/tiny_recipe.py) over every generated variant file: each
    (platform, CUDA, archs, Philox layout) renders one libflash-attn-kernels build string, the one the
    matrix expects."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(TINY_SPLIT_RECIPE)
    by_key = {k.key: k for k in matrix.kernels}
    seen = {}
    for platform, world in sorted({(c.platform, c.world) for c in matrix.cells}):
        seen.update(rendered_kernel_builds(recipe, matrix.variants_dir, platform, world))
    assert set(seen) == set(by_key)
    for key, builds in seen.items():
        assert len(builds) == 1, f"{key.id}: {sorted(builds)}"
        assert by_key[key].build_string_matches(next(iter(builds))), builds


def test_a_torch_derived_context_entry_splits_the_kernel_build_per_torch(matrix, tmp_path):
    """Control, and the trap for the real recipe: a top-level context entry computed from torch_version
    is evaluated for every output, so the kernel output renders one build per torch minor."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        TINY_SPLIT_RECIPE.replace(
            "context:\n", "context:\n  torch_minor: ${{ (torch_version | split('.'))[:2] | join('_') }}\n", 1
        )
    )
    builds = rendered_kernel_builds(recipe, matrix.variants_dir, "linux-64", "conda-forge")
    cu130 = next(k for k in builds if k.cuda == "13.0")
    assert len(builds[cu130]) == len({c.torch_minor for c in matrix.cells if kernel_key(c) == cu130}) > 1


def test_a_kernel_job_renders_the_kernel_output_of_its_cells_philox_layout(matrix, tmp_path):
    """`faforge build --part kernels*` renders the kernel output for the cell's whole kernel key: CUDA 12.9
    renders two kernel builds per platform (torch 2.7-2.9 and 2.10 on), and each cell gets its own."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(TINY_SPLIT_RECIPE)
    by_key = {k.key: k for k in matrix.kernels}
    cells = {c.id: c for c in matrix.cells}
    for cell_id in (
        "linux-64/py312/torch2.9/cu129/abi1",
        "linux-64/py312/torch2.10/cu129/abi1",
        "linux-aarch64/py312/torch2.8/cu129/abi1",
        "linux-aarch64/py312/torch2.11/cu129/abi1",
    ):
        cell = cells[cell_id]
        rendered = render_kernel_output(cell, recipe, matrix.variants_dir)
        assert rendered.recipe["package"]["name"] == KERNEL_PACKAGE
        assert by_key[kernel_key(cell)].build_string_matches(rendered.build_string), (cell_id, rendered.build_string)


def test_variants_readme_lists_every_kernel_key(matrix, repo):
    text = (repo / "variants" / "README.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| linux-") and "| philox" in line]
    assert len(rows) == len(matrix.kernels)
    for package in matrix.kernels:
        key = package.key
        row = (
            f"| {key.platform} | {key.cuda} | `{key.cuda_archs}` | philox{key.philox_offset_bits} | "
            f"{len(package.cell_ids)} ("
        )
        assert any(line.startswith(row) for line in rows), row


def test_a_kernel_packages_exact_build_is_the_one_its_cells_pin(matrix):
    """The exact kernel build: the full build string (hash included) comes from the cells' renders, never from the
    prefix; cells of one package that pin different builds, or a build not of the package, are refused."""
    rendered = selected_cells(matrix, "linux-64")
    package = next(k for k in matrix.kernels if k.key.id == "linux-64/cu130/sm80_90_100_120ptx/philox64")
    pin = package.exact_build(rendered)
    assert pin is not None and package.build_string_matches(pin.build) and pin.version == package.version
    assert pin.filename() == f"{KERNEL_PACKAGE}-{package.version}-{pin.build}.conda"
    mine = [r for r in rendered if r.cell.id in package.cell_ids]
    assert all(pin.spec in r.run_requirements for r in mine)

    def pinning(cell, build: str):
        return replace(
            cell,
            run_requirements=tuple(
                f"{KERNEL_PACKAGE} =={package.version} {build}" if s == pin.spec else s for s in cell.run_requirements
            ),
        )

    other = package.key.build_string_prefix + "0000000_" + str(package.build_number)
    with pytest.raises(FaforgeError, match="pin 2 different builds") as caught:
        package.exact_build([pinning(mine[0], other), *mine[1:]])
    assert other in str(caught.value) and "torch_version" in caught.value.hint
    with pytest.raises(FaforgeError, match="not libflash-attn-kernels"):
        package.exact_build([pinning(r, "cu129_sm80_90_100_120ptx_philox64_h1a2b3c4_0") for r in mine])
    unpinned = [replace(r, run_requirements=tuple(s for s in r.run_requirements if s != pin.spec)) for r in mine]
    assert package.exact_build(unpinned) is None, "a recipe whose flash-attn carries its kernels pins none"
    assert package.as_json(None)["build_string"] is None and package.as_json(pin)["spec"] == pin.spec
