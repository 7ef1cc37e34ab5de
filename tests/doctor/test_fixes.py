"""Fix planning against the real matrix: each cell's build-string glob selects it and nothing else,
the environment's torch maps to its cell, and the nearest cells come first when none matches."""

from __future__ import annotations

import fnmatch

import pytest

from faforge.doctor.offers import Target, closest, conda_cuda, matching
from faforge.versions import vtuple


def test_each_glob_selects_its_cell_and_no_other(offers):
    for offer in offers:
        selected = [
            o.cell.id
            for o in offers
            if o.cell.platform == offer.cell.platform and fnmatch.fnmatchcase(o.build_string, offer.build_glob)
        ]
        assert selected == [offer.cell.id], offer.build_glob
        assert offer.spec == f"flash-attn =={offer.version} {offer.build_glob}"


def test_the_environment_maps_to_its_own_cell(offers):
    for offer in offers:
        cell = offer.cell
        target = Target(cell.platform, cell.python, cell.torch, cell.cuda, cell.cxx11_abi, cell.world)
        assert target.cell_id == cell.id
        assert matching(offers, target) is offer
    pip = Target("linux-64", "3.11", "2.7.1", "12.9", 1, None)
    assert matching(offers, pip) is None or matching(offers, pip).cell.world == "conda-forge"


def test_closest_cells_when_none_matches(offers):
    cells = [
        o.cell
        for o in offers
        if o.cell.platform == "linux-64" and o.cell.python == "3.11" and o.cell.world == "conda-forge"
    ]
    if not cells:
        pytest.skip("no linux-64 py3.11 conda-forge cell")
    newest = max(cells, key=lambda c: vtuple(c.torch))
    beyond = f"{vtuple(newest.torch)[0]}.{vtuple(newest.torch)[1] + 1}.0"
    target = Target("linux-64", "3.11", beyond, newest.cuda, 1, "conda-forge")
    assert matching(offers, target) is None
    near = closest(offers, target)
    assert near[0].cell.torch_minor == newest.torch_minor and near[0].cell.cuda == newest.cuda
    assert all(o.cell.python == "3.11" and o.cell.platform == "linux-64" for o in near)


@pytest.mark.parametrize(
    ("build", "cuda"),
    [
        ("cuda129_mkl_py312_h1234567_302", "12.9"),
        ("cuda130_generic_py311_habcdef0_300", "13.0"),
        ("py3.12_cuda12.1_cudnn9.1.0_0", "12.1"),
        ("cpu_generic_py312_h1234567_2", None),
    ],
)
def test_cuda_of_a_pytorch_build_string(build, cuda):
    assert conda_cuda(build) == cuda
