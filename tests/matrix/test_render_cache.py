"""The render cache of `faforge matrix` and `faforge plan`: what it returns is what rattler-build renders,
cold or warm, and a missing, stale, corrupt or hostile entry is rendered again and rewritten."""

from __future__ import annotations

import json
import os

import pytest

from faforge.errors import FaforgeError
from faforge.matrix import load_matrix, render_cache
from faforge.matrix.render import render_cells
from faforge.matrix.render_cache import MAX_ENTRY_BYTES, cached_render_cells, entry_key
from faforge.matrix.variants import variant_config_path


def fields(rendered) -> list:
    return [
        (
            r.cell,
            r.build_string,
            r.hash,
            r.run_requirements,
            r.run_constraints,
            r.host_requirements,
            r.build_requirements,
            r.recipe,
        )
        for r in rendered
    ]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """This machine's cache, in a scratch folder, and no committed render store (test_render_store.py),
    so that a cold run renders."""
    monkeypatch.setenv("FAFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(render_cache, "store_path", lambda *_: tmp_path / "no-store.json")
    return tmp_path / "cache" / "renders"


@pytest.fixture(scope="module")
def matrix(repo):
    return load_matrix(repo)


@pytest.fixture(scope="module")
def pytorch_cells(matrix):
    """The smallest variant file's cells (18), so each case renders little."""
    return [c for c in matrix.cells if (c.platform, c.world) == ("linux-64", "pytorch")]


@pytest.fixture(scope="module")
def real(matrix, pytorch_cells):
    return fields(render_cells(pytorch_cells, matrix.recipe_path, matrix.variants_dir))


def test_cold_and_warm_equal_the_real_render_of_every_cell(matrix, cache):
    expected = fields(render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir))
    assert fields(cached_render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir)) == expected
    assert len(list(cache.glob("*.json"))) == 3  # one entry per variant file
    assert fields(cached_render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir)) == expected


def test_a_warm_run_reads_the_entry(matrix, pytorch_cells, cache):
    cached_render_cells(pytorch_cells, matrix.recipe_path, matrix.variants_dir)
    [entry] = cache.glob("*.json")
    data = json.loads(entry.read_text())
    for record in data["cells"].values():
        record["build_string"] = "from-the-cache"
    entry.write_text(json.dumps(data))
    assert {r.build_string for r in cached_render_cells(pytorch_cells, matrix.recipe_path, matrix.variants_dir)} == {
        "from-the-cache"
    }


def _not_json(entry):
    entry.write_text("{not json")


def _other_key(entry):
    data = json.loads(entry.read_text())
    entry.write_text(json.dumps({**data, "key": "0" * 64}))


def _wrong_type(entry):
    data = json.loads(entry.read_text())
    first = next(iter(data["cells"]))
    data["cells"][first]["run_requirements"] = [1, 2]
    entry.write_text(json.dumps(data))


def _missing_field(entry):
    data = json.loads(entry.read_text())
    first = next(iter(data["cells"]))
    del data["cells"][first]["hash"]
    entry.write_text(json.dumps(data))


def _missing_cell(entry):
    data = json.loads(entry.read_text())
    del data["cells"][next(iter(data["cells"]))]
    entry.write_text(json.dumps(data))


def _deep(entry):
    entry.write_text("[" * 100_000 + "]" * 100_000)


def _huge(entry):
    with open(entry, "r+b") as f:
        f.truncate(MAX_ENTRY_BYTES + 1)


def _fifo(entry):
    entry.unlink()
    os.mkfifo(entry)


def _link_to_dev_zero(entry):
    entry.unlink()
    entry.symlink_to("/dev/zero")


@pytest.mark.parametrize(
    "spoil", [_not_json, _other_key, _wrong_type, _missing_field, _missing_cell, _deep, _huge, _fifo, _link_to_dev_zero]
)
def test_a_bad_entry_is_rendered_again_and_rewritten(matrix, pytorch_cells, real, cache, spoil):
    cached_render_cells(pytorch_cells, matrix.recipe_path, matrix.variants_dir)
    [entry] = cache.glob("*.json")
    good = entry.read_text()
    spoil(entry)
    assert fields(cached_render_cells(pytorch_cells, matrix.recipe_path, matrix.variants_dir)) == real
    assert not entry.is_symlink() and entry.is_file() and entry.read_text() == good


def test_a_changed_variant_file_is_rendered_again_and_replaces_its_entry(repo_copy, cache):
    copy = load_matrix(repo_copy)
    cells = [c for c in copy.cells if (c.platform, c.world) == ("linux-64", "pytorch")]
    cached_render_cells(cells, copy.recipe_path, copy.variants_dir)
    [before] = cache.glob("*.json")
    variant_file = variant_config_path(copy.variants_dir, "linux-64", "pytorch")
    variant_file.write_text(variant_file.read_text().replace("cuda_archs: ['80;90+PTX'", "cuda_archs: ['80;86;90+PTX'"))
    again = cached_render_cells(cells, copy.recipe_path, copy.variants_dir)
    assert fields(again) == fields(render_cells(cells, copy.recipe_path, copy.variants_dir))
    [after] = cache.glob("*.json")
    assert after != before


def test_the_key_follows_the_environment_the_recipe_reads(matrix, monkeypatch):
    variant_file = variant_config_path(matrix.variants_dir, "linux-64", "pytorch")
    key = entry_key(matrix.recipe_path, variant_file, "linux-64")
    monkeypatch.setenv("FAFORGE_UNRELATED_TO_THE_RECIPE", "1")
    assert entry_key(matrix.recipe_path, variant_file, "linux-64") == key
    monkeypatch.setenv("CCACHE_DIR", "/somewhere/else")  # the recipe reads env.get("CCACHE_DIR")
    assert entry_key(matrix.recipe_path, variant_file, "linux-64") != key
    assert entry_key(matrix.recipe_path, variant_file, "linux-aarch64") != key


def test_a_recipe_that_reads_the_environment_otherwise_is_never_cached(repo_copy, cache):
    copy = load_matrix(repo_copy)
    copy.recipe_path.write_text(
        copy.recipe_path.read_text().replace('env.get("CCACHE_DIR", default="")', "env.get(name_of_dir)")
    )
    assert (
        entry_key(copy.recipe_path, variant_config_path(copy.variants_dir, "linux-64", "pytorch"), "linux-64") is None
    )


def test_a_missing_variant_file_is_the_renders_own_error(repo_copy, cache):
    copy = load_matrix(repo_copy)
    variant_config_path(copy.variants_dir, "linux-64", "pytorch").unlink()
    cells = [c for c in copy.cells if (c.platform, c.world) == ("linux-64", "pytorch")]
    with pytest.raises(FaforgeError, match="faforge generate"):
        cached_render_cells(cells, copy.recipe_path, copy.variants_dir)
