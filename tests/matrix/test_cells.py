"""The matrix as cells: existence, uniqueness, coverage, exclusions, and the cell-id errors."""

from __future__ import annotations

import pytest

from faforge.errors import DataError
from faforge.kernels.kernel_abi import load_philox_widths
from faforge.matrix import load_matrix
from faforge.matrix.cells import build_cells
from faforge.matrix.missing_cells import explain_missing
from faforge.matrix.policy import load_policy
from faforge.matrix.releases_read import load_releases
from faforge.versions import vtuple


@pytest.fixture(scope="module")
def matrix(repo):
    return load_matrix(repo)


def test_every_cell_is_a_torch_build_that_exists(matrix):
    facts = {(r.world, r.torch, r.cuda): r for r in matrix.table.releases}
    for cell in matrix.cells:
        row = facts.get((cell.world, cell.torch, cell.cuda))
        assert row is not None, f"{cell.id}: no such torch build in {cell.world}"
        assert cell.platform in row.platforms and cell.python in row.python


def test_matrix_covers_both_worlds_and_platforms(matrix):
    assert {(c.world, c.platform) for c in matrix.cells} == {
        ("conda-forge", "linux-64"),
        ("conda-forge", "linux-aarch64"),
        ("pytorch", "linux-64"),
    }


def test_no_aarch64_cell_uses_the_old_abi(matrix):
    assert all(c.cxx11_abi == 1 for c in matrix.cells if c.platform == "linux-aarch64")


def test_newest_conda_forge_torch_minor_is_covered(matrix):
    newest = max((r.torch_minor for r in matrix.table.releases if r.world == "conda-forge"), key=vtuple)
    assert any(c.world == "conda-forge" and c.torch_minor == newest for c in matrix.cells)


def test_cuda_floor_and_arch_rules_hold(matrix):
    for cell in matrix.cells:
        assert vtuple(cell.cuda) >= vtuple(matrix.policy.min_cuda)
        if vtuple(cell.cuda) < (12, 8):
            assert "100" not in cell.cuda_archs and "120" not in cell.cuda_archs, cell.id


def test_cell_ids_are_unique(matrix):
    ids = [c.id for c in matrix.cells]
    assert len(ids) == len(set(ids))


def test_conda_forge_cell_that_does_not_exist_is_rejected_by_name(matrix):
    message = explain_missing(matrix.table, matrix.policy, "linux-64/py312/torch2.7/cu121/abi1")
    assert "conda-forge has no torch 2.7 build for CUDA 12.1" in message
    assert "linux-64/py312/torch2.7/cu121/abi1" in message


def test_legacy_world_has_no_aarch64(matrix):
    message = explain_missing(matrix.table, matrix.policy, "linux-aarch64/py312/torch2.5/cu121/abi0")
    assert "no linux-aarch64 builds" in message


def test_exclusions_remove_cells_and_stale_ones_fail(repo_copy):
    policy_path = repo_copy / "variants" / "matrix.yaml"
    table = load_releases(repo_copy / "variants" / "releases.yaml")
    philox = load_philox_widths(repo_copy / "variants" / "kernel-abi.yaml")
    before = build_cells(table, load_policy(policy_path), philox)
    victim = before[0]
    text = policy_path.read_text().replace(
        "exclude: []",
        f"exclude:\n- platform: {victim.platform}\n  world: {victim.world}\n  torch: '{victim.torch_minor}'\n"
        f"  cuda: '{victim.cuda}'\n  python: '{victim.python}'\n  reason: test",
    )
    policy_path.write_text(text)
    after = build_cells(table, load_policy(policy_path), philox)
    assert victim.id not in {c.id for c in after} and len(after) == len(before) - 1
    assert "excluded in matrix.yaml: test" in explain_missing(table, load_policy(policy_path), victim.id)

    policy_path.write_text(text.replace(f"python: '{victim.python}'", "python: '3.99'"))
    with pytest.raises(DataError, match=r"exclude\[0\]: matches no cell"):
        build_cells(table, load_policy(policy_path), philox)
