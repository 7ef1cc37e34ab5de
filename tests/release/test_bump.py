"""`faforge bump` against fixture repodata served over real HTTP on loopback.

The fixture channel holds conda-forge-shaped pytorch records: builds the table already has, a new
torch release (CUDA builds for two pythons on linux-64 and sbsa linux-aarch64, plus a Jetson tegra
build), an older patch of a listed minor, and CPU builds; only the new release may become a row.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.kernels.measure_abi import RAW_HEADER, fetch_headers, header_wheel
from faforge.matrix.releases import dump_releases, header_of, load_releases
from faforge.matrix.variants import variant_config_path
from faforge.wheelfetch import RemoteFile
from tests.support.cache import cache_dir
from tests.support.http_server import serve_directory
from tests.support.measure_inputs import OFFLINE_ENV, measure_cache, simple_page
from tests.support.kernel_abi import add_kernel_abi_row
from tests.support.pypi import pypi_listing

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "bump.json").read_text())
NEW_TORCH = "2.99.1"


def record(version, build, subdir, depends=()):
    return {"name": "pytorch", "version": version, "build": build, "build_number": int(build.rsplit("_", 1)[1]),
            "subdir": subdir, "depends": list(depends), "md5": "0" * 32, "sha256": "0" * 64, "size": 1}


def write_channel(root: Path, table) -> Path:
    """conda-forge/<subdir>/repodata.json with pytorch records, the way the real channel lays them out."""
    newest = max((r for r in table.releases if r.world == "conda-forge"), key=lambda r: tuple(map(int, r.torch.split("."))))
    tag = newest.cuda.replace(".", "")
    packages = {"linux-64": {}, "linux-aarch64": {}, "noarch": {}}

    def add(subdir, version, build, depends=()):
        packages[subdir][f"pytorch-{version}-{build}.conda"] = record(version, build, subdir, depends)

    add("linux-64", newest.torch, f"cuda{tag}_mkl_py312_h0000001_300")          # already in the table
    older = f"{newest.torch.rsplit('.', 1)[0]}.0"
    if older != newest.torch:
        add("linux-64", older, f"cuda{tag}_mkl_py312_h0000002_300")             # older patch: not a new row
    for py in ("312", "313"):
        add("linux-64", NEW_TORCH, f"cuda130_mkl_py{py}_h00000a{py}_300")
        add("linux-aarch64", NEW_TORCH, f"cuda130_generic_py{py}_h00000b{py}_200", ["arm-variant * sbsa"])
        add("linux-64", NEW_TORCH, f"cpu_mkl_py{py}_h00000c{py}_100")           # CPU build: ignored
    add("linux-aarch64", NEW_TORCH, "cuda130_generic_py312_h00000d_200", ["arm-variant * tegra"])  # Jetson
    add("linux-aarch64", NEW_TORCH, "cuda126_generic_py312_h00000e_200", ["arm-variant * tegra"])  # Jetson only: no row
    channel = root / "conda-forge"
    for subdir, entries in packages.items():
        (channel / subdir).mkdir(parents=True)
        (channel / subdir / "repodata.json").write_text(json.dumps({"info": {"subdir": subdir}, "packages": {}, "packages.conda": entries}))
    return channel


@pytest.fixture
def project(tmp_path):
    """A scratch checkout whose kernel-abi.yaml already has the new minor's row."""
    for name in ("variants", "recipes", "scripts"):  # scripts/: the variant files' input digests
        shutil.copytree(REPO / name, tmp_path / name)
    add_kernel_abi_row(tmp_path / "variants", NEW_TORCH, "a test's made-up row")
    return tmp_path


def faforge(project, *args, env=None):
    env = dict(os.environ, FAFORGE_ROOT=str(project), **(env or {}))
    return subprocess.run([sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, timeout=600)


def digests(project) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((project / "variants").iterdir()) if p.is_file()}


def test_bump_adds_the_new_release_and_regenerates(project, tmp_path):
    table = load_releases(project / "variants" / "releases.yaml")
    channel = write_channel(tmp_path / "served", table)
    with serve_directory(channel.parent) as url:
        shown = faforge(project, "bump", "--source", "conda-forge", "--channel-url", url + "conda-forge", "--json")
        assert shown.returncode == 0, shown.stderr
        data = json.loads(shown.stdout)
        jsonschema.validate(data, SCHEMA)
        assert data["written"] == []
        assert load_releases(project / "variants" / "releases.yaml") == table, "without --write nothing changes"
        written = faforge(project, "bump", "--source", "conda-forge", "--channel-url", url + "conda-forge", "--write")
    assert written.returncode == 0, written.stderr
    assert [r["torch"] for r in data["new_releases"]] == [NEW_TORCH]
    row = data["new_releases"][0]
    assert row["cuda"] == "13.0" and row["python"] == ["3.12", "3.13"]
    assert row["platforms"] == ["linux-64", "linux-aarch64"]
    assert row["tegra"] is True
    assert row["source"][0].startswith(url + "conda-forge/linux-64/pytorch-2.99.1-cuda130_mkl_py312_")
    assert data["new_cells"] and all("torch2.99/cu130" in c for c in data["new_cells"])
    assert {c.split("/")[1] for c in data["new_cells"]} <= {"py312", "py313"}

    text = (project / "variants" / "releases.yaml").read_text()
    new_table = load_releases(project / "variants" / "releases.yaml")
    assert dump_releases(new_table, header_of(text)) == text, "bump must write the canonical form"
    assert len(new_table.releases) == len(table.releases) + 1
    check = faforge(project, "generate", "--check")
    assert check.returncode == 0, check.stderr
    assert all(cell in variant_config_path(project / "variants", cell.split("/")[0], "conda-forge").read_text() for cell in data["new_cells"])
    again = faforge(project, "bump", "--source", "conda-forge", "--channel-url", url + "conda-forge", "--json")
    assert again.returncode == 4, "the server is gone now: a remote failure"


def refused_bump(project, tmp_path, wheels: dict[str, Path]):
    """bump --write for NEW_TORCH, whose kernel-abi row is not in the file, offline: its wheels (file
    name -> headers) in the cache and on a local PEP 691 page."""
    shutil.copy(REPO / "variants" / "kernel-abi.yaml", project / "variants" / "kernel-abi.yaml")
    table = load_releases(project / "variants" / "releases.yaml")
    channel = write_channel(tmp_path / "served", table)
    simple_page(tmp_path / "served", [RemoteFile(w, f"https://files.example/{w}", "0" * 64, 1) for w in wheels])
    cache = measure_cache(tmp_path / "cache", wheels)
    before = digests(project)
    with serve_directory(channel.parent) as url:
        env = {"FAFORGE_CACHE_DIR": str(cache), "FAFORGE_SIMPLE_INDEX": url + "simple", **OFFLINE_ENV}
        result = faforge(project, "bump", "--source", "conda-forge", "--channel-url", url + "conda-forge", "--write", env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert digests(project) == before, "a refused bump writes nothing"
    return result.stderr


def test_a_new_torch_minor_with_a_layout_no_kernel_library_has_is_refused_and_nothing_written(project, tmp_path):
    """torch 2.13's real headers with one more PhiloxCudaState field, as a new minor's wheel: measured, refused."""
    real = fetch_headers(header_wheel(list(pypi_listing("torch").values()), "2.13.0"), cache_dir("torch-headers"))
    changed = tmp_path / "changed"
    shutil.copytree(real, changed)
    raw = changed / RAW_HEADER
    raw.write_text(raw.read_text().replace("bool captured_ = false;", "bool captured_ = false;\n  uint64_t generation_ = 0;"))
    wheel = f"torch-{NEW_TORCH}-cp311-cp311-manylinux_2_28_x86_64.whl"
    stderr = refused_bump(project, tmp_path, {wheel: changed})
    assert f"{wheel}: torch/include/{RAW_HEADER}: at::PhiloxCudaState lays Flash_fwd_params out as no kernel library does" in stderr


def test_a_new_torch_minor_without_a_wheel_to_measure_is_refused_and_nothing_written(project, tmp_path):
    stderr = refused_bump(project, tmp_path, {})
    assert f"torch {NEW_TORCH}: the wheel index lists no x86_64 CPython wheel of it" in stderr and RAW_HEADER in stderr


def test_unreachable_source_is_a_clear_error_and_changes_nothing(project):
    before = digests(project)
    result = faforge(project, "bump", "--source", "conda-forge", "--channel-url", "http://127.0.0.1:9/conda-forge", "--write")
    assert result.returncode == 4, "a network failure has its own exit code"
    assert "cannot read repodata of http://127.0.0.1:9/conda-forge" in result.stderr
    [line] = result.stderr.splitlines()  # one line; py-rattler's cause chain only with --verbose
    assert "— check the channel URL and your network" in line and "faforge publish" not in line
    verbose = faforge(project, "--verbose", "bump", "--source", "conda-forge", "--channel-url", "http://127.0.0.1:9/conda-forge")
    assert verbose.returncode == 4 and len(verbose.stderr.splitlines()) > 1, verbose.stderr
    assert digests(project) == before


def test_a_local_mirror_is_never_written_as_the_rows_source(project, tmp_path):
    """Rows cite where their build was read (`source:`); a local folder's file:// URL would cite this machine."""
    table = load_releases(project / "variants" / "releases.yaml")
    channel = write_channel(tmp_path / "served", table)
    before = digests(project)
    for given in (str(channel), channel.as_uri()):
        result = faforge(project, "bump", "--source", "conda-forge", "--channel-url", given, "--write")
        assert result.returncode == 2 and "Traceback" not in result.stderr
        assert f"--channel-url {given}: a local channel" in result.stderr and "serve the mirror over http(s)" in result.stderr
        assert digests(project) == before
    shown = faforge(project, "bump", "--source", "conda-forge", "--channel-url", str(channel), "--json")
    assert shown.returncode == 0 and [r["torch"] for r in json.loads(shown.stdout)["new_releases"]] == [NEW_TORCH]


def test_unknown_source_is_bad_input(project):
    result = faforge(project, "bump", "--source", "nope")
    assert result.returncode == 2 and "torch-sources.yaml" in result.stderr


# PyTorch's wheel server as a PEP 503 page (hrefs with hashes, '+' percent-encoded as on the real one).
WHEEL_FILES = [
    "torch-2.99.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl",
    "torch-2.99.0%2Bcu130-cp313-cp313-manylinux_2_28_aarch64.whl",
    "torch-2.99.0%2Bcu128-cp313-cp313t-manylinux_2_28_x86_64.whl",
    "torch-2.99.0%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl",       # CPU: ignored
    "torch-2.99.0%2Bcu130-cp312-cp312-win_amd64.whl",                  # not Linux: ignored
    "torch-2.13.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl",      # a minor the table lists
    "torch-2.0.1%2Bcu118-cp311-cp311-linux_x86_64.whl",                # history
]


def write_wheel_index(root: Path) -> Path:
    page = root / "whl" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    links = "\n".join(f'<a href="/whl/{name}#sha256={"0" * 64}">{name.replace("%2B", "+")}</a><br/>' for name in WHEEL_FILES)
    page.write_text(f"<!DOCTYPE html>\n<html><body><h1>Links for torch</h1>\n{links}\n</body></html>\n")
    return page.parent


def test_wheel_index_lists_minors_ahead_of_the_channels_and_adds_no_rows(project, tmp_path):
    index = write_wheel_index(tmp_path / "served")
    before = digests(project)
    with serve_directory(tmp_path / "served") as url:
        shown = faforge(project, "bump", "--source", "pytorch-wheels", "--channel-url", url + "whl/torch/", "--json")
        text = faforge(project, "bump", "--source", "pytorch-wheels", "--channel-url", url + "whl/torch/", "--write")
    assert index.is_dir() and shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["wheel_only"] == [{"torch": "2.99.0", "cuda": ["12.8", "13.0"], "python": ["3.12", "3.13"],
                                   "platforms": ["linux-64", "linux-aarch64"]}]
    assert data["new_releases"] == [] and data["new_cells"] == [] and data["written"] == []
    assert text.returncode == 0 and "no conda world has yet" in text.stdout and "2.99.0" in text.stdout
    assert digests(project) == before, "wheel-only releases never change the table"


def test_unreachable_wheel_index_is_a_clear_error(project):
    result = faforge(project, "bump", "--source", "pytorch-wheels", "--channel-url", "http://127.0.0.1:9/whl/torch/")
    assert result.returncode == 4 and "cannot read the wheel index http://127.0.0.1:9/whl/torch/" in result.stderr
    assert "Traceback" not in result.stderr
