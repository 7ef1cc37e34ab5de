"""Generated variant configs: marked as generated, fresh, and caught when stale."""

from __future__ import annotations

import subprocess
import sys

import yaml

from faforge.families.registry import FAMILIES
from faforge.matrix import load_matrix
from faforge.matrix.variants import GENERATED_HEADER, generated_files, stale_files


def _faforge(args, root):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args],
        capture_output=True,
        text=True,
        env={"FAFORGE_ROOT": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_generated_variant_configs_are_fresh(repo):
    matrix = load_matrix(repo, FAMILIES)
    expected = generated_files(matrix.cells, matrix.variants_dir, matrix.families, matrix.pip_cells)
    assert stale_files(expected) == [], "run `faforge generate` and commit variants/"
    for path in expected:
        assert path.read_text().startswith(GENERATED_HEADER)


def test_one_file_per_platform_and_world(repo):
    matrix = load_matrix(repo, FAMILIES)
    names = {path.name for path in generated_files(matrix.cells, matrix.variants_dir, matrix.families)}
    assert names == {
        "linux-64-conda-forge.yaml",
        "linux-64-pytorch.yaml",
        "linux-aarch64-conda-forge.yaml",
        "flash-attn-3-linux-64-conda-forge.yaml",
        "flash-attn-3-linux-aarch64-conda-forge.yaml",
        "flash-attn-4-conda-forge.yaml",  # noarch: one file for every platform
    }
    with_pip = {
        path.name for path in generated_files(matrix.cells, matrix.variants_dir, matrix.families, matrix.pip_cells)
    }
    assert with_pip == names | {"linux-64-pypi.yaml", "linux-aarch64-pypi.yaml"}


def test_generated_files_are_marked_in_gitattributes_and_readme(repo):
    attributes = (repo / ".gitattributes").read_text()
    readme = (repo / "variants" / "README.md").read_text()
    matrix = load_matrix(repo, FAMILIES)
    for path in generated_files(matrix.cells, matrix.variants_dir, matrix.families, matrix.pip_cells):
        assert f"variants/{path.name} linguist-generated=true" in attributes
        assert path.name in readme
    assert "faforge generate" in readme


def test_generate_removes_a_generated_file_the_matrix_no_longer_produces(repo_copy):
    """The old per-platform layout (variants/linux-64.yaml) is found and removed, a hand file is not."""
    old = repo_copy / "variants" / "linux-64.yaml"
    old.write_text(GENERATED_HEADER + "python: ['3.12.*']\n")
    hand = repo_copy / "variants" / "hand-written.yaml"
    hand.write_text("# not generated\npython: ['3.12.*']\n")
    check = _faforge(["generate", "--check"], repo_copy)
    assert check.returncode == 1 and f"obsolete: {old}" in check.stderr and "hand-written" not in check.stderr
    assert _faforge(["generate"], repo_copy).returncode == 0
    assert not old.exists() and hand.exists()
    up_to_date = _faforge(["generate", "--check"], repo_copy)
    assert up_to_date.returncode == 0 and up_to_date.stdout == "generated files are up to date\n"  # not silence


def test_freshness_check_fails_when_the_table_changes_without_regeneration(repo_copy):
    assert _faforge(["generate", "--check"], repo_copy).returncode == 0
    releases = repo_copy / "variants" / "releases.yaml"
    # Drop python 3.11 from the last conda release row (the newest torch of its world): that removes a cell.
    # (A pip world's rows list a wheel per python, so there that edit is a data error: test_pip_world.py.)
    lines = releases.read_text().splitlines(keepends=True)
    pip_rows = lines.index("- world: pypi\n")
    row = max(i for i, line in enumerate(lines[:pip_rows]) if line.startswith("  python:") and "'3.11', " in line)
    lines[row] = lines[row].replace("'3.11', ", "")
    releases.write_text("".join(lines))
    result = _faforge(["generate", "--check"], repo_copy)
    assert result.returncode == 1 and "stale" in result.stderr
    assert _faforge(["generate"], repo_copy).returncode == 0
    assert _faforge(["generate", "--check"], repo_copy).returncode == 0


def test_every_variant_file_zips_each_cells_philox_width(repo):
    """The recipe's kernel output reads `philox_offset_bits`; zipped with the other keys, each position is
    one cell's, so a torch minor never gets another minor's layout."""
    matrix = load_matrix(repo)
    for path in generated_files(matrix.cells, matrix.variants_dir, pip_cells=matrix.pip_cells):
        data = yaml.safe_load(path.read_text())
        assert "philox_offset_bits" in data["zip_keys"][0], path.name
        assert len(data["philox_offset_bits"]) == len(data["torch_version"]), path.name
        widths = dict(zip(data["torch_version"], data["philox_offset_bits"], strict=True))
        assert widths == {
            c.torch: str(c.philox_offset_bits)
            for c in [*matrix.cells, *matrix.pip_cells]
            if path.name.startswith(f"{c.platform}-{c.world}.")
        }
