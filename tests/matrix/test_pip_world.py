"""The pip world `pypi`: PyPI's torch wheels as rows of variants/releases.yaml and pip cells of the
matrix, apart from the conda cells, sharing the conda worlds' kernel packages where the kernel key is the same.

The rows' facts (CUDA, C++ ABI, pythons) are read again from the real PyPI wheels for the oldest and newest
minor per platform (torch/version.py and torch/lib/libc10.so by range requests, cached in the test cache's
torch-libs/ beside tests/abi/test_torch_abi_wheels.py's), so a committed row cannot claim an ABI its build lacks.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
import yaml

from faforge.abi.check import torch_facts
from faforge.errors import DataError, FaforgeError
from faforge.matrix import load_matrix
from faforge.matrix.cells import PIP_CELL_ID, build_cells
from faforge.matrix.inputs import glue_wheel_hash
from faforge.matrix.kernels import kernel_key
from faforge.matrix.missing_cells import explain_missing
from faforge.matrix.pip_builds import kernel_wheel_version, pip_builds, pip_kernel_pins
from faforge.matrix.releases import TORCH_WHEEL, WHEEL_ARCH_PLATFORMS
from faforge.matrix.releases_read import load_releases
from faforge.matrix.render import cell_key, render_platform
from faforge.matrix.render_cache import cached_pip_kernels, cached_render_cells
from faforge.matrix.render_packages import render_pip_kernels
from faforge.matrix.variants import variant_config_path
from faforge.versions import vtuple
from faforge.wheelfetch import fetch_member
from tests.support.cache import cache_dir
from tests.support.pypi import pypi_listing

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
LIBS = cache_dir("torch-libs")


@pytest.fixture(scope="module")
def matrix(repo):
    return load_matrix(repo)


def test_pip_cells_are_apart_from_the_conda_cells_with_unique_world_prefixed_ids(matrix):
    assert matrix.pip_cells and all(c.world == "pypi" for c in matrix.pip_cells)
    ids = [c.id for c in matrix.pip_cells]
    assert len(ids) == len(set(ids))
    assert all(PIP_CELL_ID.fullmatch(i) and i.startswith("pypi/") for i in ids)
    assert not {c.id for c in matrix.cells} & set(ids)
    assert all(c.world in matrix.table.worlds for c in matrix.cells), "no pip cell among the conda cells"
    assert {c.platform for c in matrix.pip_cells} == {"linux-64", "linux-aarch64"}
    minors = sorted({c.torch_minor for c in matrix.pip_cells}, key=vtuple)
    assert minors[0] == matrix.policy.pip_min_torch == "2.4" and vtuple(minors[-1]) >= (2, 15)
    assert all(
        c.wheel in row.source
        for c in matrix.pip_cells
        for row in matrix.table.pip_releases
        if (row.torch, c.platform) == (c.torch, c.platform) and c.platform in row.platforms
    )


def test_each_pip_cell_has_its_rows_abi_and_the_rule_holds_for_pypi(matrix):
    """The ABI is the row's, read from the build: PyPI's torch is ABI 0 up to 2.6 and 1 from 2.7 in every row."""
    for row in matrix.table.pip_releases:
        assert row.cxx11_abi == (0 if vtuple(row.torch_minor) <= (2, 6) else 1), row
    for cell in matrix.pip_cells:
        assert cell.id.endswith(f"/abi{cell.cxx11_abi}")
    assert {c.cxx11_abi for c in matrix.pip_cells if c.torch_minor == "2.6"} == {0}
    assert {c.cxx11_abi for c in matrix.pip_cells if c.torch_minor == "2.7"} == {1}


def test_python_set_is_per_release(matrix):
    pythons = {}
    for cell in matrix.pip_cells:
        pythons.setdefault((cell.torch_minor, cell.platform), set()).add(cell.python)
    assert pythons[("2.4", "linux-64")] == {"3.10", "3.11", "3.12"}, "3.8 and 3.9 wheels exist, below min_python"
    assert "3.10" not in pythons[("2.15", "linux-64")] and "3.15" in pythons[("2.15", "linux-64")], "2.15 dropped 3.10"
    assert pythons[("2.13", "linux-aarch64")] == {"3.10", "3.11", "3.12", "3.13", "3.14"}
    assert not any(p == "linux-aarch64" and vtuple(m) < (2, 11) for m, p in pythons), (
        "PyPI's aarch64 torch is CPU-only before 2.11"
    )


def test_a_kernel_key_a_conda_world_has_is_that_very_package(matrix, repo):
    """The pip cell of a shared key links the conda package: the pypi variant file's render of the kernel output
    is byte for byte the conda cells' pin (same build string, hash included), so it is built once."""
    conda_keys = {k.key: k for k in matrix.kernels}
    shared = {kernel_key(c) for c in matrix.pip_cells} & set(conda_keys)
    assert {k.id for k in shared} >= {
        "linux-64/cu121/sm80_90ptx/philox32",
        "linux-64/cu126/sm80_90ptx/philox32",
        "linux-64/cu130/sm80_90_100_120ptx/philox64",
        "linux-aarch64/cu130/sm80_90_100_120ptx/philox64",
    }
    pip_renders = render_pip_kernels(
        matrix.pip_cells, matrix.recipe_path, matrix.variants_dir
    )  # rattler-build itself, no cache
    rendered = cached_render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir)
    for key in shared:
        pin = conda_keys[key].exact_build(rendered)
        assert pip_renders[key.id].build_string == pin.build, key.id
    assert not {k.key for k in matrix.pip_kernels} & set(conda_keys), "no second package under a conda key"
    assert all(k.world == "pypi" for k in matrix.pip_kernels)


def test_the_pip_world_brings_its_own_cuda_128_kernel_package_rendered_from_the_recipe(matrix):
    own = {k.key.id: k for k in matrix.pip_kernels}
    assert {"linux-64/cu128/sm80_90_100_120ptx/philox32", "linux-64/cu128/sm80_90_100_120ptx/philox64"} <= set(own)
    cells = [c for c in matrix.pip_cells if c.cuda == "12.8"]
    assert {c.torch_minor for c in cells} == {"2.8", "2.9", "2.10"}, "PyPI's default CUDA for torch 2.8-2.10"
    renders = render_pip_kernels(cells, matrix.recipe_path, matrix.variants_dir)
    for key_id in ("linux-64/cu128/sm80_90_100_120ptx/philox32", "linux-64/cu128/sm80_90_100_120ptx/philox64"):
        r = renders[key_id]
        assert r.recipe["package"]["name"] == "libflash-attn-kernels" and own[key_id].build_string_matches(
            r.build_string
        )
        assert own[key_id].world == "pypi" and set(own[key_id].cell_ids) == {
            c.id for c in cells if kernel_key(c).id == key_id
        }
    assert (
        cached_pip_kernels(cells, matrix.recipe_path, matrix.variants_dir)[key_id].build_string
        == renders[key_id].build_string
    )


def test_the_recipe_renders_no_flash_attn_conda_package_for_the_pip_world(matrix):
    variant_file = variant_config_path(matrix.variants_dir, "linux-64", "pypi")
    assert set(yaml.safe_load(variant_file.read_text())["torch_world"]) == {"pypi"}
    first = next(c for c in matrix.pip_cells if c.platform == "linux-64")
    names = {
        v.recipe.to_dict()["package"]["name"]
        for v in render_platform(matrix.recipe_path, variant_file, "linux-64", {cell_key(first.variant())})
    }
    assert names == {"libflash-attn-kernels"}


def test_every_kernel_package_is_listed_once_with_the_cells_of_every_world(matrix):
    every = matrix.all_kernels
    assert len({k.key for k in every}) == len(every) == len(matrix.kernels) + len(matrix.pip_kernels)
    ids = [i for k in every for i in k.cell_ids]
    assert sorted(ids) == sorted([c.id for c in matrix.cells] + [c.id for c in matrix.pip_cells])
    assert [k.cell_ids for k in matrix.kernels] == [
        tuple(i for i in k.cell_ids if not i.startswith("pypi/")) for k in every if k.world != "pypi"
    ], "the conda packages keep their cells"


def test_glue_identity_follows_its_inputs(matrix):
    builds = {b.cell.id: b for b in pip_builds(matrix)}
    b = builds["pypi/linux-64/py312/torch2.11/cu130/abi1"]
    assert re.fullmatch(r"py312_torch2_11_cu130_cxx11abi1_h[0-9a-f]{7}_0", b.build_string)
    assert (
        b.glue_version == "2.8.3.post2+torch2.11.cu130.abi1" and b.glue_build_tag == "0" + b.build_string.split("_")[-2]
    )
    assert b.requires_dist == ("torch>=2.11,<2.12", f"libflash-attn-kernels=={b.kernel_wheel_version}", "einops")
    assert b.kernel_wheel_version == kernel_wheel_version("2.8.3.post2", b.kernel_build) and b.kernel_shared
    assert b.glue_wheel().startswith("flash_attn-2.8.3.post2+torch2.11.cu130.abi1-0h") and b.glue_wheel().endswith(
        "-cp312-cp312-manylinux_*_x86_64.whl"
    )
    assert len({x.build_string for x in builds.values()}) == len(builds)
    args = {"platform": "linux-64", "version": "2.8.3.post2", "build_number": 0}
    base = glue_wheel_hash(b.cell.variant(), {"glue_inputs": "a", "kernel_inputs": "b"}, b.kernel_build, **args)
    assert base == glue_wheel_hash(b.cell.variant(), {"glue_inputs": "a", "kernel_inputs": "b"}, b.kernel_build, **args)
    assert base != glue_wheel_hash(b.cell.variant(), {"glue_inputs": "c", "kernel_inputs": "b"}, b.kernel_build, **args)
    assert base != glue_wheel_hash(
        b.cell.variant(), {"glue_inputs": "a", "kernel_inputs": "b"}, b.kernel_build.replace("_h", "_h0"), **args
    )
    assert base != glue_wheel_hash(
        {**b.cell.variant(), "torch_version": "2.11.1"},
        {"glue_inputs": "a", "kernel_inputs": "b"},
        b.kernel_build,
        **args,
    )


def test_kernel_pins_refuse_a_shared_key_the_pip_world_renders_differently(matrix, repo_copy):
    """Were the pip world's compilers another than the conda world's for a shared CUDA, the 'same' package
    would be two: an error naming the key, not a silent second build."""
    policy = repo_copy / "variants" / "matrix.yaml"
    policy.write_text(
        policy.read_text().replace(
            "- world: pypi\n  cuda: '>=12.8'\n  gcc: '14'", "- world: pypi\n  cuda: '>=12.8'\n  gcc: '13'"
        )
    )
    assert (
        subprocess.run(
            [sys.executable, "-m", "faforge", "generate"],
            env={"FAFORGE_ROOT": str(repo_copy), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
        ).returncode
        == 0
    )
    changed = load_matrix(repo_copy)
    with pytest.raises(
        FaforgeError, match=r"kernel key linux-64/cu130/\S+: the pypi world renders .* the conda world's cells pin"
    ):
        pip_kernel_pins(changed, [c for c in changed.pip_cells if c.cuda == "13.0" and c.platform == "linux-64"])


def test_a_missing_pip_cell_is_explained(matrix):
    table, policy = matrix.table, matrix.policy
    assert "has wheels only for python" in explain_missing(table, policy, "pypi/linux-64/py310/torch2.15/cu132/abi1")
    assert "is C++ ABI 0" in explain_missing(table, policy, "pypi/linux-64/py312/torch2.6/cu124/abi1")
    assert "no CUDA build of torch 2.8 for linux-aarch64" in explain_missing(
        table, policy, "pypi/linux-aarch64/py312/torch2.8/cu128/abi1"
    )


def _pip_row(**fields) -> str:
    row = {
        "world": "pypi",
        "torch": "2.11.0",
        "cuda": "'13.0'",
        "python": "['3.12']",
        "platforms": "[linux-64]",
        "cxx11_abi": "1",
        "source": "[torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl]",
        **fields,
    }
    return "- " + "\n  ".join(f"{k}: {v}" for k, v in row.items() if v is not None) + "\n"


HEAD = (
    "schema: 1\nworlds:\n  conda-forge:\n    channels: [conda-forge]\n    cxx11_abi: 1\n    platforms: [linux-64]\n"
    "  pypi:\n    index: https://pypi.org/simple\n    channels: [conda-forge]\n"
    "    platforms: [linux-64, linux-aarch64]\nreleases:\n"
)


@pytest.mark.parametrize(
    ("row", "key", "words"),
    [
        (_pip_row(cxx11_abi=None), "releases[0].cxx11_abi", "read from the torch build"),
        (_pip_row(cxx11_abi="true"), "releases[0].cxx11_abi", "invalid value"),
        (_pip_row(python="['3.12', '3.13']"), "releases[0].source", "no wheel for python 3.13 on linux-64"),
        (
            _pip_row(source="[torch-2.11.1-cp312-cp312-manylinux_2_28_x86_64.whl]"),
            "releases[0].source[0]",
            "not a wheel of torch 2.11.0",
        ),
        (
            _pip_row(source="[torch-2.11.0-cp312-cp312-manylinux_2_28_aarch64.whl]"),
            "releases[0].source[0]",
            "python 3.12 on linux-aarch64 is not among",
        ),
        (
            _pip_row(source="[torch-2.11.0-cp313-cp313t-manylinux_2_28_x86_64.whl]"),
            "releases[0].source[0]",
            "not a CPython torch wheel",
        ),
        (_pip_row(index="ftp://x"), "releases[0].index", "invalid value"),
        (_pip_row(tegra="true"), "releases[0].tegra", "unknown key"),
    ],
)
def test_bad_pip_rows_name_file_key_and_value(tmp_path, row, key, words):
    path = tmp_path / "releases.yaml"
    path.write_text(HEAD + row)
    with pytest.raises(DataError) as info:
        load_releases(path)
    assert info.value.key == key and words in str(info.value), str(info.value)


def test_a_conda_row_may_not_carry_its_own_abi_and_a_pip_release_is_not_repeated(tmp_path):
    path = tmp_path / "releases.yaml"
    path.write_text(
        HEAD + "- world: conda-forge\n  torch: 2.7.1\n  cuda: '12.9'\n  python: ['3.12']\n  platforms: [linux-64]\n"
        "  cxx11_abi: 1\n  source: https://x\n"
    )
    with pytest.raises(DataError, match=re.escape("a conda world's C++ ABI is the world's")):
        load_releases(path)
    path.write_text(HEAD + _pip_row() + _pip_row())
    with pytest.raises(DataError, match=r"duplicate of releases\[0\] \(pypi torch 2.11.0 cuda 13.0 on linux-64\)"):
        load_releases(path)


@pytest.mark.slow  # reads PyPI's torch listing
def test_every_committed_wheel_is_on_pypi(matrix):
    listing = pypi_listing("torch")
    missing = [w for row in matrix.table.pip_releases if not row.index for w in row.source if w not in listing]
    assert not missing, missing


def _sample(matrix) -> list[tuple[str, object]]:
    """(platform, row) of the oldest and newest torch minor per platform."""
    out = []
    for platform in ("linux-64", "linux-aarch64"):
        rows = sorted((r for r in matrix.table.pip_releases if platform in r.platforms), key=lambda r: vtuple(r.torch))
        out += [(platform, rows[0]), (platform, rows[-1])]
    return out


@pytest.mark.slow  # reads PyPI's torch wheels
def test_committed_rows_have_the_cuda_and_abi_of_the_real_wheels(matrix):
    """Read again from the wheels, as `faforge bump` read them: torch/version.py's cuda and the C++ ABI of
    torch/lib/libc10.so's exports (faforge.abi.check.torch_facts) of the cp312 (or first) wheel."""
    rows = []
    for platform, row in _sample(matrix):
        names = [w for w in row.source if WHEEL_ARCH_PLATFORMS[TORCH_WHEEL.fullmatch(w)["arch"]] == platform]
        wheel = next((w for w in names if "-cp312-" in w), names[0])
        for member in ("torch/version.py", "torch/lib/libc10.so"):
            if not (LIBS / wheel / member).is_file():
                fetch_member(pypi_listing("torch")[wheel], member, LIBS)
        facts = torch_facts([LIBS / wheel / "torch" / "lib"])
        rows.append((wheel, facts.cuda, facts.cxx11_abi, facts.machine))
        assert (facts.cuda, facts.cxx11_abi) == (row.cuda, row.cxx11_abi), (wheel, facts)
        assert facts.machine == {"linux-64": "x86_64", "linux-aarch64": "aarch64"}[platform]
    print("\n".join(map(str, rows)))
    assert {r[0].split("-")[1] for r in rows} >= {"2.4.1", "2.11.0", "2.15.0"}


def _offline(args):
    cmd = [sys.executable, "-m", "faforge", *args]
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"]).returncode == 0:
        cmd = ["unshare", "-n", *cmd]
    start = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return result, time.monotonic() - start


def test_matrix_world_pypi_lists_the_pip_cells_offline_fast_and_to_its_schema(matrix):
    default, _ = _offline(["matrix", "--json"])
    assert default.returncode == 0 and not [c for c in json.loads(default.stdout) if c["id"].startswith("pypi/")], (
        "default: the conda worlds"
    )
    result, seconds = _offline(["matrix", "--world", "pypi", "--json"])
    assert result.returncode == 0, result.stderr
    cells = json.loads(result.stdout)
    jsonschema.validate(cells, json.loads((SCHEMAS / "matrix.json").read_text()))
    assert [c["id"] for c in cells] == [c.id for c in matrix.pip_cells]
    cell = next(c for c in cells if c["id"] == "pypi/linux-64/py312/torch2.6/cu124/abi0")
    assert (
        cell["torch_wheel"] == "torch-2.6.0-cp312-cp312-manylinux1_x86_64.whl"
        and cell["index_name"] == "torch2.6-cu124"
    )
    assert cell["kernel_package"]["torch_source"] == "pytorch" and cell["kernel_package"]["shared"] is True
    every, _ = _offline(["matrix", "--world", "all", "--json"])
    assert len(json.loads(every.stdout)) == len(matrix.cells) + len(matrix.pip_cells)
    kernels, _ = _offline(["matrix", "--kernels", "--world", "all", "--json"])
    listed = json.loads(kernels.stdout)
    jsonschema.validate(listed, json.loads((SCHEMAS / "matrix-kernels.json").read_text()))
    assert len(listed) == len(matrix.all_kernels) and all(k["build_string"] for k in listed)
    table, seconds_table = _offline(["matrix", "--world", "pypi"])
    assert table.returncode == 0 and f"{len(matrix.pip_cells)} pip cells" in table.stdout
    print(f"faforge matrix --world pypi --json: {seconds:.2f} s, table {seconds_table:.2f} s (offline)")
    # the goal: <= 1 s on the development machine; 2 s leaves room for a loaded CI
    assert seconds < 2.0 and seconds_table < 2.0


def test_an_unknown_world_is_bad_input():
    result, _ = _offline(["matrix", "--world", "conda"])
    assert result.returncode == 2 and "--world conda: no such torch world" in result.stderr and "pypi" in result.stderr


def test_the_conda_cells_do_not_see_the_pip_rows(matrix, repo):
    """Removing the pip world's rows changes no conda cell, kernel package or id."""
    bare = replace(matrix.table, pip_releases=())
    assert build_cells(bare, matrix.policy, matrix.philox) == matrix.cells
