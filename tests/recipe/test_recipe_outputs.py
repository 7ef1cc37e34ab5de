"""The real recipe's two outputs, as rattler-build renders them from the generated variant files
(the split build): one libflash-attn-kernels build per (platform, CUDA, archs, Philox layout), whatever the
torch minors, pythons and ABIs that share it, and every cell's flash-attn pinned to exactly that build."""

from __future__ import annotations

from collections import defaultdict

import pytest

from faforge.kernels.kernel_abi import PHILOX_OFFSET_BITS, load_kernel_abi
from faforge.matrix import load_matrix
from faforge.matrix.kernels import FLASH_ATTN_PACKAGE, KERNEL_PACKAGE
from faforge.matrix.render import render_platform
from faforge.matrix.variants import variant_config_path

# What the kernel objects may depend on; anything else in the output's used variant would split it.
KERNEL_VARIANT_KEYS = {
    "cuda_compiler_version",
    "cuda_archs",
    "philox_offset_bits",
    "target_platform",
    "build_platform",
    "c_compiler",
    "c_compiler_version",
    "cxx_compiler",
    "cxx_compiler_version",
    "cuda_compiler",
    "c_stdlib",
    "c_stdlib_version",
    "kernel_inputs",
}  # the digest of its inputs (faforge.matrix.inputs): one value per variant file
PER_CELL_KEYS = ("python", "torch_version", "torch_world", "cxx11_abi")


@pytest.fixture(scope="module")
def rendered(repo):
    """[(platform, world, rendered variant)] for every variant file of the matrix."""
    matrix = load_matrix(repo)
    out = []
    for platform, world in sorted({(c.platform, c.world) for c in matrix.cells}):
        for variant in render_platform(
            matrix.recipe_path, variant_config_path(matrix.variants_dir, platform, world), platform
        ):
            out.append((platform, world, variant))
    return matrix, out


def _layout_key(platform: str, used: dict) -> tuple[str, str, str, str]:
    return platform, str(used["cuda_compiler_version"]), str(used["cuda_archs"]), str(used["philox_offset_bits"])


def test_one_kernel_build_per_platform_cuda_archs_and_layout(rendered):
    matrix, variants = rendered
    builds = defaultdict(set)
    for platform, _, variant in variants:
        recipe = variant.recipe.to_dict()
        if recipe["package"]["name"] == KERNEL_PACKAGE:
            used = variant.recipe.used_variant
            assert not set(used) - KERNEL_VARIANT_KEYS, (
                f"the kernel output uses {sorted(set(used) - KERNEL_VARIANT_KEYS)}"
            )
            builds[_layout_key(platform, used)].add(recipe["build"]["string"])
    cell_keys = {(c.platform, c.cuda, c.cuda_archs) for c in matrix.cells}
    assert {k[:3] for k in builds} == cell_keys
    assert all(len(strings) == 1 for strings in builds.values()), {k: s for k, s in builds.items() if len(s) > 1}
    # CUDA 12.9 serves torch 2.7-2.9 (32-bit offset_intragraph_) and 2.10+ (64-bit): two builds there.
    assert len(builds) == len(cell_keys) + sum(1 for k in cell_keys if k[1] == "12.9")
    for key, (string,) in builds.items():
        platform, cuda, archs, bits = key
        assert string.startswith(
            f"cu{cuda.replace('.', '')}_sm{archs.replace(';', '_').replace('+PTX', 'ptx')}_philox{bits}_h"
        ), string


def test_every_cell_pins_exactly_its_kernel_build(rendered):
    matrix, variants = rendered
    kernel_build = {}
    for platform, _, variant in variants:
        if variant.recipe.to_dict()["package"]["name"] == KERNEL_PACKAGE:
            kernel_build[_layout_key(platform, variant.recipe.used_variant)] = variant.recipe.to_dict()["build"][
                "string"
            ]
    layouts = load_kernel_abi()
    cells = 0
    for platform, _, variant in variants:
        recipe = variant.recipe.to_dict()
        if recipe["package"]["name"] != FLASH_ATTN_PACKAGE:
            continue
        cells += 1
        used = variant.recipe.used_variant
        assert all(key in used for key in PER_CELL_KEYS)
        # the layout of the cell's torch, from the measured table (variants/kernel-abi.yaml)
        layout = layouts[".".join(str(used["torch_version"]).split(".")[:2])].offset_intragraph
        pin = variant.pin_subpackages[KERNEL_PACKAGE]
        assert pin.exact and pin.version == matrix.policy.flash_attn_version
        assert (
            pin.build_string
            == kernel_build[_layout_key(platform, {**used, "philox_offset_bits": PHILOX_OFFSET_BITS[layout]})]
        ), recipe["build"]["string"]
        # the pin is both a host requirement (to link against) and a run requirement
        for section in ("host", "run"):
            assert {"pin_subpackage": {"name": KERNEL_PACKAGE, "exact": True}} in recipe["requirements"][section]
    assert cells == len(matrix.cells)


def test_the_kernel_package_needs_no_python_and_no_torch(rendered):
    _, variants = rendered
    _, _, variant = next(v for v in variants if v[2].recipe.to_dict()["package"]["name"] == KERNEL_PACKAGE)
    requirements = variant.recipe.to_dict()["requirements"]
    names = {
        section: {str(r).split()[0] for r in requirements.get(section, []) if isinstance(r, str)}
        for section in ("build", "host", "run")
    }
    for section in ("host", "run"):
        assert not names[section] & {"python", "pytorch", "libtorch", "pip"}, (section, names[section])
    # python runs the build script only (a tool, like ninja); unpinned, so no python variant of the output
    assert "python" in names["build"] and "python" not in variant.recipe.used_variant
    assert "pytorch" not in names["build"]
