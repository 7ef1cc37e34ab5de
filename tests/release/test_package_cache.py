"""faforge build drops rattler's cached extraction of a package it is about to build (release/package_cache.py).

The end-to-end case is tests/conda_world/test_recipe_in_world.py: rebuilt after the recipe's kernel test
changed, under the same build string, its test ran the old package's command from rattler's cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from faforge.release.package_cache import cache_root, evict

NAME = "libflash-attn-kernels-2.8.3.post2-cu130_sm80_philox64_hd3e7e53_0"


def test_the_cache_root_is_rattlers(tmp_path):
    assert cache_root({"RATTLER_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "rattler" / "cache"
    assert cache_root({}) == Path.home() / ".cache" / "rattler" / "cache"


def test_the_extraction_and_its_lock_go_and_nothing_else(tmp_path):
    pkgs = tmp_path / "pkgs"
    (pkgs / NAME / "info").mkdir(parents=True)
    (pkgs / f"{NAME}.lock").write_text("")
    other = pkgs / NAME.replace("hd3e7e53", "h0000000")
    other.mkdir()
    removed = evict(f"{NAME}.conda", {"RATTLER_CACHE_DIR": str(tmp_path)})
    assert removed == [pkgs / NAME, pkgs / f"{NAME}.lock"]
    assert not (pkgs / NAME).exists() and other.is_dir()
    assert evict(f"{NAME}.conda", {"RATTLER_CACHE_DIR": str(tmp_path)}) == []


def test_a_link_is_removed_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    (tmp_path / "pkgs").mkdir()
    (tmp_path / "pkgs" / NAME).symlink_to(target)
    evict(f"{NAME}.conda", {"RATTLER_CACHE_DIR": str(tmp_path)})
    assert (target / "keep").is_file() and not (tmp_path / "pkgs" / NAME).exists()


@pytest.mark.parametrize("bad", ["", ".conda", "../x.conda", "a/b.conda", ".hidden.conda"])
def test_a_name_that_is_no_package_file_is_refused(bad, tmp_path):
    with pytest.raises(ValueError):
        evict(bad, {"RATTLER_CACHE_DIR": str(tmp_path)})
