"""Each torch release's pythons are its own facts, not a global list.

The rows `faforge bump` adds carry the pythons the channel's records publish, and the cells are exactly
those above variants/matrix.yaml's min_python floor, so a Python arrives and leaves with the releases.
Facts used: the real conda-forge pytorch records of tests/fixtures/real_packages.yaml, and PyPI's real
torch file listing (which cpXY wheels each release publishes).
"""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import pytest

from faforge.errors import DataError
from faforge.matrix import load_matrix
from faforge.matrix.cells import build_cells
from faforge.matrix.policy import load_policy
from faforge.release.bump.releases import load_sources, new_releases, parse_builds
from faforge.versions import vtuple
from tests.support.pypi import pypi_listing
from tests.support.real_records import torch_records

WHEEL = re.compile(r"torch-(?P<torch>\d+\.\d+\.\d+)-cp(?P<py>3\d+)-cp3\d+-manylinux[_0-9a-z.]*x86_64\.whl")


def record(entry: dict) -> SimpleNamespace:
    return SimpleNamespace(
        **entry,
        url=f"https://conda.anaconda.org/conda-forge/{entry['subdir']}/{entry['name']}-{entry['version']}-{entry['build']}.conda",
    )


def pypi_pythons(torch: str) -> tuple[str, ...]:
    """The CPython versions PyPI has an x86_64 wheel of `torch` for (free-threaded builds aside)."""
    found = {m["py"] for name in pypi_listing("torch") if (m := WHEEL.fullmatch(name)) and m["torch"] == torch}
    return tuple(sorted((f"{p[0]}.{p[1:]}" for p in found), key=vtuple))


def test_rows_from_the_real_records_carry_their_pythons_and_the_cells_follow():
    """Before torch 2.13, the real 2.13.0 records (py312 builds) give rows and cells for python 3.12 only."""
    matrix = load_matrix()
    before = replace(matrix.table, releases=tuple(r for r in matrix.table.releases if r.torch_minor != "2.13"))
    source = load_sources(matrix.variants_dir / "torch-sources.yaml")["conda-forge"]
    rows = new_releases(before, source, parse_builds(source, [record(r) for r in torch_records()]))
    assert [(r.torch, r.cuda, r.python) for r in rows] == [("2.13.0", "12.9", ("3.12",)), ("2.13.0", "13.0", ("3.12",))]
    cells = build_cells(replace(before, releases=before.releases + tuple(rows)), matrix.policy, matrix.philox)
    assert {c.python for c in cells if c.torch_minor == "2.13"} == {"3.12"}


@pytest.mark.slow  # reads PyPI's torch listing
def test_a_python_comes_and_goes_with_the_releases_that_publish_it():
    """3.14 is built where a torch build has it and nowhere else; a release without 3.10 (torch 2.15 on
    PyPI) gets no 3.10 cell, while the releases before it keep theirs."""
    matrix = load_matrix()
    by_row = {(c.world, c.torch, c.cuda): set() for c in matrix.cells}
    for c in matrix.cells:
        by_row[(c.world, c.torch, c.cuda)].add(c.python)
    for row in matrix.table.releases:
        if (row.world, row.torch, row.cuda) in by_row:
            assert by_row[(row.world, row.torch, row.cuda)] == {
                p for p in row.python if vtuple(p) >= vtuple(matrix.policy.min_python)
            }, row
    assert "3.14" in {c.python for c in matrix.cells} and "3.14" not in {
        c.python for c in matrix.cells if c.world == "pytorch"
    }

    pythons_215, pythons_214 = pypi_pythons("2.15.0"), pypi_pythons("2.14.0")
    assert "3.10" in pythons_214 and "3.10" not in pythons_215 and "3.14" in pythons_215, (pythons_214, pythons_215)
    template = next(r for r in matrix.table.releases if r.torch == "2.13.0" and r.cuda == "13.0")
    rows = [
        replace(template, torch=torch, python=pythons, source=(f"https://pypi.org/simple/torch/ ({torch})",))
        for torch, pythons in (("2.14.0", pythons_214), ("2.15.0", pythons_215))
    ]
    philox = replace(matrix.philox, by_minor={**matrix.philox.by_minor, "2.14": 64, "2.15": 64})
    cells = build_cells(replace(matrix.table, releases=matrix.table.releases + tuple(rows)), matrix.policy, philox)
    assert {c.python for c in cells if c.torch_minor == "2.15"} == set(pythons_215)
    assert "3.10" in {c.python for c in cells if c.torch_minor == "2.14"}


def test_a_global_python_list_is_refused(tmp_path):
    text = load_matrix().policy.path.read_text()
    path = tmp_path / "matrix.yaml"
    path.write_text(text.replace("min_python: '3.10'", "python: ['3.10', '3.11']"))
    with pytest.raises(DataError, match=re.escape("matrix.yaml: python: a global list of pythons is no longer read")):
        load_policy(path)
