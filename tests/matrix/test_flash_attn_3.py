"""FlashAttention-3's packages (the second family): one flash-attn-3 per (platform, CUDA, arch list), from
the real release table, checked on rattler-build's own render of the generated variant files."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from faforge.families.flash_attn_3.matrix import fa3_packages, fa3_variant_config_name, load_fa3_policy, packages_of
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN_3
from faforge.matrix import load_matrix
from faforge.matrix.render import render_platform

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "tests" / "schemas" / "matrix-fa3.json"


@pytest.fixture(scope="module")
def matrix():
    return load_matrix(REPO, FAMILIES)


@pytest.fixture(scope="module")
def packages(matrix):
    return packages_of(matrix)


@pytest.fixture(scope="module")
def rendered(matrix, packages):
    """{(platform, cuda, archs): rendered recipe dict} over every FA3 variant file."""
    out = {}
    for platform in sorted({p.platform for p in packages}):
        for variant in render_platform(
            REPO / FLASH_ATTN_3.recipe_dir / "recipe.yaml",
            matrix.variants_dir / fa3_variant_config_name(platform, "conda-forge"),
            platform,
        ):
            used = variant.recipe.used_variant
            key = (platform, str(used["cuda_compiler_version"]), str(used["cuda_archs"]))
            assert key not in out, f"two renders of {key}"
            out[key] = variant.recipe.to_dict()
    return out


def test_one_package_per_platform_cuda_and_arch_list(matrix, rendered, packages):
    assert [p.id for p in packages] == [
        "linux-64/cu129/sm80_90a",
        "linux-64/cu130/sm80_90a",
        "linux-aarch64/cu129/sm80_90a",
        "linux-aarch64/cu130/sm80_90a",
    ]
    assert set(rendered) == {(p.platform, p.cuda, p.cuda_archs) for p in packages}
    for package in packages:
        recipe = rendered[(package.platform, package.cuda, package.cuda_archs)]
        assert recipe["package"] == {"name": FLASH_ATTN_3.package, "version": "3.0.0"}
        assert re.fullmatch(rf"{package.build_string_head}_faforge_h[0-9a-f]{{7}}_0", recipe["build"]["string"]), (
            recipe["build"]["string"]
        )


def test_run_requirements_serve_a_torch_range_and_every_python_from_the_floor(matrix, rendered, packages):
    for package in packages:
        recipe = rendered[(package.platform, package.cuda, package.cuda_archs)]
        major = int(package.cuda.split(".")[0])
        sbsa = ["arm-variant * sbsa"] if package.platform == "linux-aarch64" else []
        assert recipe["requirements"]["run"] == [
            "python >=3.10",
            "pytorch >=2.9 cuda*",
            f"cuda-version >={package.cuda},<{major + 1}",
            *sbsa,
        ]
        host = recipe["requirements"]["host"]
        assert f"pytorch ==2.13.0 cuda{package.cuda.replace('.', '')}*" in host and {
            "python 3.10.* *_cpython",
            "python-abi3",
        } <= set(host)
        assert (
            recipe["build"]["python"]["version_independent"] is True
        )  # conda-forge's abi3 convention: no python_abi pin
        ignored = recipe["requirements"]["ignore_run_exports"]
        assert "pytorch" in ignored["from_package"] and "libtorch" in ignored["by_name"]
        assert ",".join(package.served) in recipe["about"]["description"]


def test_each_package_serves_the_minors_its_cuda_range_admits(matrix, packages):
    served = {p.id: p.served for p in packages}
    assert served["linux-64/cu129/sm80_90a"] == ("2.9", "2.10", "2.11", "2.12", "2.13")
    assert served["linux-64/cu130/sm80_90a"] == ("2.10", "2.11", "2.12", "2.13")  # conda-forge has no cu130 torch 2.9
    for package in packages:  # each served minor has a torch build of this CUDA on this platform
        for minor in package.served:
            assert any(
                r.torch_minor == minor and r.cuda == package.cuda and package.platform in r.platforms
                for r in matrix.table.releases
            )


def test_faforge_matrix_lists_them(matrix, packages):
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "matrix", "--fa3", "--json"], capture_output=True, text=True, check=True
    )
    listed = json.loads(result.stdout)
    jsonschema.validate(listed, json.loads(SCHEMA.read_text()))
    assert [r["id"] for r in listed] == [p.id for p in packages]
    human = subprocess.run(
        [sys.executable, "-m", "faforge", "matrix", "--fa3", "--platform", "linux-64"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        "linux-64/cu130/sm80_90a" in human.stdout
        and "2.10, 2.11, 2.12, 2.13" in human.stdout
        and "aarch64" not in human.stdout
    )


def test_a_newest_torch_without_the_floor_python_raises_that_packages_floor(matrix):
    """torch 2.15's wheels have no cp310: its package is built with, and needs, the oldest python it has."""
    newest = max(
        (r for r in matrix.table.releases if r.world == "conda-forge" and r.cuda == "13.0"),
        key=lambda r: tuple(map(int, r.torch.split("."))),
    )
    without_310 = replace(newest, python=tuple(p for p in newest.python if p != "3.10"))
    table = replace(matrix.table, releases=tuple(without_310 if r is newest else r for r in matrix.table.releases))
    packages = {
        p.id: p for p in fa3_packages(table, matrix.policy, load_fa3_policy(matrix.variants_dir / "matrix.yaml"))
    }
    assert (
        packages["linux-64/cu130/sm80_90a"].python == "3.11"
        and packages["linux-64/cu130/sm80_90a"].variant()["python"] == "3.11.* *_cpython"
    )
    assert packages["linux-64/cu129/sm80_90a"].python == "3.10"
