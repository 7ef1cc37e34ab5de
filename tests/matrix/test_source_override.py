"""`faforge build --source SDIST`: the recipe renders with only its upstream url and sha256 replaced."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile

import pytest

from faforge import paths
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN_3
from faforge.matrix.render import SourceOverride, recipe_file, with_source


def tiny_sdist(path):
    """A real (if tiny) .tar.gz: --source refuses files that are not tar archives."""
    with tarfile.open(path, "w:gz") as tar:
        tar.add(__file__, arcname="flash_attn-2.8.3.post2/PKG-INFO")
    return path


def test_a_file_that_is_not_a_tar_archive_is_refused(tmp_path):
    junk = tmp_path / "flash_attn-2.8.3.post2.tar.gz"
    junk.write_bytes(b"not really a tarball")
    with pytest.raises(FaforgeError, match="not a tar archive"):
        SourceOverride.from_sdist(junk)


def test_only_the_upstream_source_lines_change(tmp_path):
    sdist = tiny_sdist(tmp_path / "flash_attn-2.8.3.post2.tar.gz")
    source = SourceOverride.from_sdist(sdist)
    assert source.sha256 == hashlib.sha256(sdist.read_bytes()).hexdigest() and source.url == sdist.as_uri()
    original = (paths.recipe_dir() / "recipe.yaml").read_text()
    changed = with_source(original, source)
    removed = [line for line in original.splitlines() if line not in changed.splitlines()]
    added = [line for line in changed.splitlines() if line not in original.splitlines()]
    assert len(removed) == len(added) == 2, (removed, added)
    assert "pypi.org" in removed[0] and "sha256" in removed[1]
    assert added == [f"  - url: {sdist.as_uri()}", f'    sha256: "{source.sha256}"']


def test_the_overridden_recipe_sits_beside_the_real_one_and_goes_away(tmp_path):
    sdist = tiny_sdist(tmp_path / "x.tar.gz")
    recipe = paths.recipe_dir() / "recipe.yaml"
    with recipe_file(recipe, SourceOverride.from_sdist(sdist)) as overridden:
        assert overridden.name == "recipe.yaml" and overridden.parent.parent == recipe.parent.parent
        # every other file of the recipe folder is there, so relative `path:` sources still resolve
        assert (overridden.parent / "build_flash_attn.py").resolve() == (
            recipe.parent / "build_flash_attn.py"
        ).resolve()
        assert sdist.as_uri() in overridden.read_text()
    assert not overridden.parent.exists()
    with recipe_file(recipe, None) as plain:
        assert plain == recipe


def test_a_missing_sdist_is_a_user_error(tmp_path):
    with pytest.raises(FaforgeError, match="no such file"):
        SourceOverride.from_sdist(tmp_path / "missing.tar.gz")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "build",
            "linux-64/py312/torch2.11/cu130/abi1",
            "--source",
            str(tmp_path / "missing.tar.gz"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr and "no such file" in result.stderr


def test_the_flash_attn_3_recipes_git_source_is_replaced_by_the_tarball(tmp_path):
    """FA3 builds from a git commit (no sdist has its C++ sources): --source swaps `git:` and `rev:` for the file."""
    source = SourceOverride.from_sdist(tiny_sdist(tmp_path / "flash-attention-standin.tar.gz"))
    original = (paths.repo_root() / FLASH_ATTN_3.recipe_dir / "recipe.yaml").read_text()
    changed = with_source(original, source)
    removed = [line.strip() for line in original.splitlines() if line not in changed.splitlines()]
    added = [line.strip() for line in changed.splitlines() if line not in original.splitlines()]
    assert removed == ["- git: https://github.com/Dao-AILab/flash-attention.git", "rev: ${{ commit }}"]
    assert added == [f"- url: {source.url}", f'sha256: "{source.sha256}"']
