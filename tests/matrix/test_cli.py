"""`faforge matrix` and `faforge render` as a user runs them: offline, JSON schema, errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "matrix.json"
KERNELS_SCHEMA = SCHEMA.with_name("matrix-kernels.json")


def run(args, *, offline=False):
    cmd = [sys.executable, "-m", "faforge", *args]
    if offline:
        cmd = ["unshare", "-n", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _network_can_be_cut() -> bool:
    return shutil.which("unshare") is not None and subprocess.run(["unshare", "-n", "true"]).returncode == 0


@pytest.fixture(scope="module")
def matrix_json():
    if not _network_can_be_cut():
        pytest.skip("unshare -n is not permitted here, so the offline run cannot be proven")
    result = run(["matrix", "--platform", "all", "--json"], offline=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_matrix_json_runs_offline_and_matches_schema(matrix_json):
    jsonschema.validate(matrix_json, json.loads(SCHEMA.read_text()))
    assert {(c["platform"], c["torch_source"]) for c in matrix_json} == {
        ("linux-64", "conda-forge"),
        ("linux-aarch64", "conda-forge"),
        ("linux-64", "pytorch"),
    }
    assert not [c for c in matrix_json if c["platform"] == "linux-aarch64" and c["cxx11_abi"] == 0]
    counts = Counter((c["platform"], c["build_string"]) for c in matrix_json)
    assert max(counts.values()) == 1


def test_kernel_packages_json_lists_each_once_with_the_cells_that_name_it(matrix_json):
    result = run(["matrix", "--kernels", "--json"])
    assert result.returncode == 0, result.stderr
    kernels = json.loads(result.stdout)
    jsonschema.validate(kernels, json.loads(KERNELS_SCHEMA.read_text()))
    keys = {(c["platform"], c["cuda"], c["cuda_archs"], c["philox_offset_bits"]) for c in matrix_json}
    assert len(kernels) == len({k["id"] for k in kernels}) == len(keys)
    by_id = {k["id"]: k for k in kernels}
    for cell in matrix_json:
        package = by_id[cell["kernel_package"]["id"]]
        assert cell["id"] in package["cells"]
        fields = ("platform", "cuda", "cuda_archs", "philox_offset_bits")
        assert [package[f] for f in fields] == [cell[f] for f in fields]
        assert cell["kernel_package"] == {
            k: package[k] for k in ("id", "name", "version", "build_string_prefix", "build_string")
        }
    assert sum(len(k["cells"]) for k in kernels) == len(matrix_json)
    human = run(["matrix", "--kernels", "--platform", "linux-aarch64"])
    assert (
        human.returncode == 0
        and f"{len([k for k in kernels if k['platform'] == 'linux-aarch64'])} kernel packages" in human.stdout
    )


def test_kernel_packages_json_names_the_exact_build_every_cell_pins():
    """The exact kernel build: each kernel package names its full build string, hash included, with the file CI
    builds and the spec its cells pin (as `--fa3 --json` names each FA3 build), not only the prefix up to
    the hash; and the table prints it. Taken from the cells' own renders, never derived by hand."""
    cells = json.loads(run(["matrix", "--json"]).stdout)
    result = run(["matrix", "--kernels", "--json"])
    assert result.returncode == 0, result.stderr
    kernels = json.loads(result.stdout)
    jsonschema.validate(kernels, json.loads(KERNELS_SCHEMA.read_text()))
    pins: dict[str, set[str]] = {}
    for cell in cells:
        pins.setdefault(cell["kernel_package"]["id"], set()).update(
            r for r in cell["run_requirements"] if r.startswith("libflash-attn-kernels ")
        )
    human = run(["matrix", "--kernels"]).stdout
    for package in kernels:
        build = package["build_string"]
        assert build.startswith(package["build_string_prefix"]) and build.endswith(f"_{package['build_number']}"), build
        assert package["spec"] == f"libflash-attn-kernels =={package['version']} {build}"
        assert pins[package["id"]] == {package["spec"]}, "every cell of the package pins exactly this build"
        assert package["file"] == f"libflash-attn-kernels-{package['version']}-{build}.conda"
        assert build in human
    assert len({k["build_string"] for k in kernels if k["platform"] == "linux-64"}) == len(
        [k for k in kernels if k["platform"] == "linux-64"]
    )


def test_matrix_platform_filter(matrix_json):
    result = run(["matrix", "--platform", "linux-aarch64", "--json"])
    cells = json.loads(result.stdout)
    assert cells == [c for c in matrix_json if c["platform"] == "linux-aarch64"]


def test_human_table_lists_every_cell(matrix_json):
    result = run(["matrix"])
    assert result.returncode == 0
    for cell in matrix_json:
        assert cell["build_string"] in result.stdout
    assert f"{len(matrix_json)} cells" in result.stdout


def test_render_by_build_string_and_by_id(matrix_json):
    cell = matrix_json[0]
    by_string = run(["render", cell["build_string"], "--json"])
    by_id = run(["render", cell["id"], "--json"])
    assert by_string.returncode == 0 and by_id.returncode == 0
    recipe = json.loads(by_string.stdout)
    assert recipe == json.loads(by_id.stdout)
    assert recipe["build"]["string"] == cell["build_string"]
    assert recipe["requirements"]["run"] == cell["run_requirements"]


def test_unknown_cell_exits_2_and_names_the_nearest(matrix_json):
    cell = matrix_json[0]
    result = run(["render", cell["build_string"][:-1] + "9"])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "nearest cells:" in result.stderr and cell["build_string"] in result.stderr


def test_nonexistent_torch_build_is_explained():
    result = run(["render", "linux-64/py312/torch2.7/cu121/abi1"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "conda-forge has no torch 2.7 build for CUDA 12.1" in result.stderr


def test_bad_platform_is_a_usage_error():
    result = run(["matrix", "--platform", "win-64"])
    assert result.returncode == 2 and "Traceback" not in result.stderr and "invalid choice" in result.stderr


def test_render_fills_the_test_scripts_from_the_cell(matrix_json):
    """rattler-build leaves test scripts unrendered in its stage-1 recipe; render shows what the test will run."""
    for cell in (matrix_json[0], next(c for c in matrix_json if c["cxx11_abi"] == 0)):
        recipe = json.loads(run(["render", cell["id"], "--json"]).stdout)
        scripts = [t["script"] for t in recipe["tests"] if "script" in t]
        assert not [s for s in scripts if "${{" in json.dumps(s)], scripts
        assert [
            s
            for s in scripts
            if f'--expect-cxx11-abi {cell["cxx11_abi"]} --expect-archs "{cell["cuda_archs"]}"'
            in json.dumps(s).replace('\\"', '"')
        ]


def test_a_build_string_with_another_hash_names_its_own_cells(matrix_json):
    """A build string from an older recipe (another hash) names every cell with the same fields, on each platform."""
    heads = Counter(c["build_string"].rsplit("_h", 1)[0] for c in matrix_json)
    head = next(h for h, n in heads.items() if n > 1)  # the same fields on linux-64 and linux-aarch64
    result = run(["render", f"{head}_h0000000_0"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    for c in [c for c in matrix_json if c["build_string"].rsplit("_h", 1)[0] == head]:
        assert f"{c['build_string']} ({c['id']})" in result.stderr


def test_matrix_help_promises_run_requirements_only_where_they_are_shown():
    """The plain table has no run requirements; --help used to promise them there."""
    description = " ".join(run(["matrix", "--help"]).stdout.split())
    header = run(["matrix", "--platform", "linux-aarch64"]).stdout.splitlines()[0]
    for shown in ("build string", "kernel package"):
        assert shown in header and shown in description
    assert "requirements" not in header
    assert "(`--json` adds its channels, run requirements and constraints)" in description
