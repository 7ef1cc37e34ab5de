"""The committed render store (variants/renders/): what it holds is what rattler-build renders today, a
fresh clone's first `faforge matrix` reads it instead of rendering, and a store that no longer matches
its inputs is never read and is reported by `faforge generate --check`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from faforge.matrix import load_matrix
from faforge.matrix.render import render_cells
from faforge.matrix.render_cache import entry_key, entry_text, store_path
from faforge.matrix.variants import variant_config_path


def faforge(args, root, cache, **env):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "FAFORGE_ROOT": str(root), "FAFORGE_CACHE_DIR": str(cache), **env},
    )


@pytest.fixture(scope="module")
def matrix(repo):
    return load_matrix(repo)


@pytest.mark.parametrize(
    "platform,world", [("linux-64", "conda-forge"), ("linux-64", "pytorch"), ("linux-aarch64", "conda-forge")]
)
def test_the_store_is_todays_real_render(matrix, platform, world):
    cells = [c for c in matrix.cells if (c.platform, c.world) == (platform, world)]
    key = entry_key(matrix.recipe_path, variant_config_path(matrix.variants_dir, platform, world), platform, {})
    expected = entry_text(key, render_cells(cells, matrix.recipe_path, matrix.variants_dir))
    assert store_path(matrix.variants_dir, platform, world).read_text() == expected, (
        "run `faforge generate` and commit variants/renders/"
    )


def test_a_cold_matrix_reads_the_store_and_renders_nothing(repo, tmp_path):
    cold = faforge(["matrix", "--json"], repo, tmp_path / "cache")
    assert cold.returncode == 0, cold.stderr
    assert not (tmp_path / "cache" / "renders").exists()  # a render would have been cached there
    rendered = faforge(["matrix", "--json"], repo, tmp_path / "cache", CCACHE_DIR="/elsewhere")  # the recipe reads it
    assert rendered.returncode == 0, rendered.stderr
    assert len(list((tmp_path / "cache" / "renders").glob("*.json"))) == 3
    assert json.loads(cold.stdout) == json.loads(rendered.stdout)


@pytest.mark.slow  # the stale store is not read, so every cell renders with rattler-build (3 s of CPU)
def test_a_stale_store_is_not_read_and_generate_check_names_it(repo_copy, tmp_path):
    recipe = repo_copy / "recipes" / "flash-attn" / "recipe.yaml"
    recipe.write_text(
        recipe.read_text().replace("build_flash_attn.py --kernels-only", "build_flash_attn.py  --kernels-only")
    )
    stale = store_path(repo_copy / "variants", "linux-64", "pytorch")
    data = stale.read_text().replace('"build_string": "', '"build_string": "from-a-stale-store-')
    stale.write_text(data)
    result = faforge(["matrix", "--json"], repo_copy, tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "from-a-stale-store" not in result.stdout
    check = faforge(["generate", "--check"], repo_copy, tmp_path / "cache")
    assert check.returncode == 1 and f"stale: {stale}" in check.stderr
    assert faforge(["generate"], repo_copy, tmp_path / "cache").returncode == 0
    assert "from-a-stale-store" not in stale.read_text()
    assert faforge(["generate", "--check"], repo_copy, tmp_path / "cache").returncode == 0
