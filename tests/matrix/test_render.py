"""Every cell renders offline through py-rattler-build, with the right build string and pins."""

from __future__ import annotations

import fnmatch
import re
from collections import Counter

import pytest
from rattler import MatchSpec

from faforge.matrix import load_matrix
from faforge.matrix.render import render_cells
from faforge.versions import next_minor

BUILD_STRING = re.compile(r"py(\d+)_torch(\d+)_(\d+)_cu(\d+)_cxx11abi([01])_h[0-9a-f]{7}_(\d+)")


@pytest.fixture(scope="module")
def rendered(repo):
    matrix = load_matrix(repo)
    out = render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir)
    assert len(out) == len(matrix.cells)
    return out


def test_both_platforms_render(rendered):
    assert {r.cell.platform for r in rendered} == {"linux-64", "linux-aarch64"}


def test_build_string_names_the_cell(rendered, repo):
    build_number = load_matrix(repo).policy.build_number
    for r in rendered:
        match = BUILD_STRING.fullmatch(r.build_string)
        assert match, r.build_string
        py, major, minor, cuda, abi, number = match.groups()
        cell = r.cell
        assert py == cell.python.replace(".", "")
        assert f"{major}.{minor}" == cell.torch_minor
        assert cuda == cell.cuda.replace(".", "")
        assert int(abi) == cell.cxx11_abi
        assert int(number) == build_number


def test_build_strings_are_unique_per_platform(rendered):
    counts = Counter((r.cell.platform, r.build_string) for r in rendered)
    assert max(counts.values()) == 1


def test_minor_globs_do_not_bleed_into_two_digit_minors(rendered):
    for r in rendered:
        glob = f"*_torch{r.cell.torch_minor.replace('.', '_')}_*"
        matches = {o.cell.torch_minor for o in rendered if fnmatch.fnmatchcase(o.build_string, glob)}
        assert matches == {r.cell.torch_minor}, (glob, matches)
    # The classic trap, spelled out: torch 2.1 must not match torch 2.10.
    assert not fnmatch.fnmatchcase("py312_torch2_10_cu129_cxx11abi1_h1234567_0", "*_torch2_1_*")


def test_run_requirements_pin_the_torch_build(rendered):
    for r in rendered:
        cell, run = r.cell, set(r.run_requirements)
        # conda-forge's spelling (faforge.matrix.cells.python_variant): no free-threaded or other python.
        assert (
            f"python {cell.python}.* *_{'cp' + cell.python.replace('.', '') if cell.python >= '3.13' else 'cpython'}"
            in run
        )
        assert f"cuda-version >={cell.cuda},<{int(cell.cuda.split('.')[0]) + 1}" in run
        if cell.world == "conda-forge":
            bound = next_minor(cell.torch)
            assert f"pytorch >={cell.torch},<{bound} {cell.cuda_tag.replace('cu', 'cuda')}*" in run
            assert f"libtorch >={cell.torch},<{bound}" in run
            assert ("arm-variant * sbsa" in run) == (cell.platform == "linux-aarch64")
        else:
            assert f"pytorch =={cell.torch} py3*" in run
            assert f"pytorch-cuda {cell.cuda}.*" in run
            assert "pytorch-mutex * cuda" in run


def test_run_requirements_parse_strictly(rendered):
    for r in rendered:
        for spec in r.run_requirements:
            MatchSpec(spec, strict=True)  # raises on anything a strict client would reject


def test_host_uses_the_cells_compilers(rendered):
    for r in rendered:
        build = set(r.build_requirements)
        platform = r.cell.platform
        assert f"cuda-nvcc_{platform} {r.cell.cuda}.*" in build
        assert f"gxx_{platform} {r.cell.host_gcc}.*" in build
        assert f"sysroot_{platform} {r.cell.c_stdlib_version}.*" in build


def test_strict_parsing_really_rejects_dotted_build_globs():
    """Why the legacy world is selected with `py3*`: the obvious spec does not parse."""
    with pytest.raises(Exception, match="build string"):
        MatchSpec("pytorch ==2.5.1 py3.12_cuda12.1*", strict=True)
