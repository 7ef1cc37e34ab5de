"""`faforge bump` against fixture repodata served over real HTTP on loopback.

The fixture channel holds conda-forge-shaped pytorch records: builds the table already has, a new
torch release (CUDA builds for two pythons on linux-64 and sbsa linux-aarch64, plus a Jetson tegra
build), an older patch of a listed minor, and CPU builds; only the new release may become a row.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import jsonschema
import pytest

from faforge.kernels.measure_abi import RAW_HEADER, fetch_headers, header_wheel
from faforge.matrix.releases import dump_releases, header_of
from faforge.matrix.releases_read import load_releases
from faforge.matrix.variants import variant_config_path
from faforge.wheelfetch import RemoteFile, fetch_member
from tests.support.cache import cache_dir
from tests.support.http_server import serve_directory
from tests.support.kernel_abi import add_kernel_abi_row
from tests.support.measure_inputs import OFFLINE_ENV, measure_cache, simple_page
from tests.support.pypi import pypi_listing

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "bump.json").read_text())
NEW_TORCH = "2.99.1"


def record(version, build, subdir, depends=()):
    return {
        "name": "pytorch",
        "version": version,
        "build": build,
        "build_number": int(build.rsplit("_", 1)[1]),
        "subdir": subdir,
        "depends": list(depends),
        "md5": "0" * 32,
        "sha256": "0" * 64,
        "size": 1,
    }


def write_channel(root: Path, table) -> Path:
    """conda-forge/<subdir>/repodata.json with pytorch records, the way the real channel lays them out."""
    newest = max(
        (r for r in table.releases if r.world == "conda-forge"), key=lambda r: tuple(map(int, r.torch.split(".")))
    )
    tag = newest.cuda.replace(".", "")
    packages = {"linux-64": {}, "linux-aarch64": {}, "noarch": {}}

    def add(subdir, version, build, depends=()):
        packages[subdir][f"pytorch-{version}-{build}.conda"] = record(version, build, subdir, depends)

    add("linux-64", newest.torch, f"cuda{tag}_mkl_py312_h0000001_300")  # already in the table
    older = f"{newest.torch.rsplit('.', 1)[0]}.0"
    if older != newest.torch:
        add("linux-64", older, f"cuda{tag}_mkl_py312_h0000002_300")  # older patch: not a new row
    for py in ("312", "313"):
        add("linux-64", NEW_TORCH, f"cuda130_mkl_py{py}_h00000a{py}_300")
        add("linux-aarch64", NEW_TORCH, f"cuda130_generic_py{py}_h00000b{py}_200", ["arm-variant * sbsa"])
        add("linux-64", NEW_TORCH, f"cpu_mkl_py{py}_h00000c{py}_100")  # CPU build: ignored
    add("linux-aarch64", NEW_TORCH, "cuda130_generic_py312_h00000d_200", ["arm-variant * tegra"])  # Jetson
    add("linux-aarch64", NEW_TORCH, "cuda126_generic_py312_h00000e_200", ["arm-variant * tegra"])  # Jetson only: no row
    channel = root / "conda-forge"
    for subdir, entries in packages.items():
        (channel / subdir).mkdir(parents=True)
        (channel / subdir / "repodata.json").write_text(
            json.dumps({"info": {"subdir": subdir}, "packages": {}, "packages.conda": entries})
        )
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
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, timeout=600
    )


def digests(project) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((project / "variants").iterdir())
        if p.is_file()
    }


@pytest.mark.slow  # regenerates every variant file of the scratch checkout (renders with rattler-build)
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
    assert all(
        cell in variant_config_path(project / "variants", cell.split("/")[0], "conda-forge").read_text()
        for cell in data["new_cells"]
    )
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
        result = faforge(
            project, "bump", "--source", "conda-forge", "--channel-url", url + "conda-forge", "--write", env=env
        )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert digests(project) == before, "a refused bump writes nothing"
    return result.stderr


@pytest.mark.slow  # reads PyPI's torch headers
def test_a_new_torch_minor_with_a_layout_no_kernel_library_has_is_refused_and_nothing_written(project, tmp_path):
    """torch 2.13's real headers with one more PhiloxCudaState field, as a new minor's wheel: measured, refused."""
    real = fetch_headers(header_wheel(list(pypi_listing("torch").values()), "2.13.0"), cache_dir("torch-headers"))
    changed = tmp_path / "changed"
    shutil.copytree(real, changed)
    raw = changed / RAW_HEADER
    raw.write_text(
        raw.read_text().replace("bool captured_ = false;", "bool captured_ = false;\n  uint64_t generation_ = 0;")
    )
    wheel = f"torch-{NEW_TORCH}-cp311-cp311-manylinux_2_28_x86_64.whl"
    stderr = refused_bump(project, tmp_path, {wheel: changed})
    assert (
        f"{wheel}: torch/include/{RAW_HEADER}: at::PhiloxCudaState lays Flash_fwd_params out as no kernel library does"
        in stderr
    )


@pytest.mark.slow  # flash.h from the flash-attn sdist on PyPI
def test_a_new_torch_minor_without_a_wheel_to_measure_is_refused_and_nothing_written(project, tmp_path):
    stderr = refused_bump(project, tmp_path, {})
    assert f"torch {NEW_TORCH}: the wheel index lists no x86_64 CPython wheel of it" in stderr and RAW_HEADER in stderr


def test_unreachable_source_is_a_clear_error_and_changes_nothing(project):
    before = digests(project)
    result = faforge(
        project, "bump", "--source", "conda-forge", "--channel-url", "http://127.0.0.1:9/conda-forge", "--write"
    )
    assert result.returncode == 4, "a network failure has its own exit code"
    assert "cannot read repodata of http://127.0.0.1:9/conda-forge" in result.stderr
    [line] = result.stderr.splitlines()  # one line; py-rattler's cause chain only with --verbose
    assert "— check the channel URL and your network" in line and "faforge publish" not in line
    verbose = faforge(
        project, "--verbose", "bump", "--source", "conda-forge", "--channel-url", "http://127.0.0.1:9/conda-forge"
    )
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
        assert (
            f"--channel-url {given}: a local channel" in result.stderr
            and "serve the mirror over http(s)" in result.stderr
        )
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
    "torch-2.99.0%2Bcpu-cp312-cp312-manylinux_2_28_x86_64.whl",  # CPU: ignored
    "torch-2.99.0%2Bcu130-cp312-cp312-win_amd64.whl",  # not Linux: ignored
    "torch-2.13.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl",  # a minor the table lists
    "torch-2.0.1%2Bcu118-cp311-cp311-linux_x86_64.whl",  # history
]


def write_wheel_index(root: Path) -> Path:
    page = root / "whl" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    links = "\n".join(
        f'<a href="/whl/{name}#sha256={"0" * 64}">{name.replace("%2B", "+")}</a><br/>' for name in WHEEL_FILES
    )
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
    assert data["wheel_only"] == [
        {
            "torch": "2.99.0",
            "cuda": ["12.8", "13.0"],
            "python": ["3.12", "3.13"],
            "platforms": ["linux-64", "linux-aarch64"],
        }
    ]
    assert data["new_releases"] == [] and data["new_cells"] == [] and data["written"] == []
    assert text.returncode == 0 and "no conda world has yet" in text.stdout and "2.99.0" in text.stdout
    assert digests(project) == before, "wheel-only releases never change the table"


def test_unreachable_wheel_index_is_a_clear_error(project):
    result = faforge(project, "bump", "--source", "pytorch-wheels", "--channel-url", "http://127.0.0.1:9/whl/torch/")
    assert result.returncode == 4 and "cannot read the wheel index http://127.0.0.1:9/whl/torch/" in result.stderr
    assert "Traceback" not in result.stderr


# --- the pip world: PyPI's Simple API JSON and a PyTorch per-CUDA PEP 503 page, on loopback ----------

PIP_TORCH = "2.15.0"
REAL_LIBC10 = {arch: f"torch-{PIP_TORCH}-cp312-cp312-manylinux_2_28_{arch}.whl" for arch in ("x86_64", "aarch64")}


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Files with HEAD and byte ranges, as PyPI's file host and download.pytorch.org serve wheels."""

    files: ClassVar[dict[str, tuple[bytes, str]]] = {}  # the served files, set by each test

    def _lookup(self):
        return self.files.get(urllib.parse.unquote(self.path.split("?")[0]))

    def do_HEAD(self):
        found = self._lookup()
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(found[0]) if found else 0))
        self.end_headers()

    def do_GET(self):
        found = self._lookup()
        if not found:
            self.send_error(404)
            return
        data, kind = found
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if match:
            data = data[int(match[1]) : int(match[2]) + 1]
            self.send_response(206)
        else:
            self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def wheel_server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    RangeHandler.files = {}
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def real_libc10(arch: str) -> bytes:
    """torch 2.15.0's torch/lib/libc10.so for `arch` (range-read from PyPI once, cached like test_torch_abi_wheels)."""
    libs = cache_dir("torch-libs")
    cached = libs / REAL_LIBC10[arch] / "torch" / "lib" / "libc10.so"
    if not cached.is_file():
        fetch_member(pypi_listing("torch")[REAL_LIBC10[arch]], "torch/lib/libc10.so", libs)
    return cached.read_bytes()


def fake_torch_wheel(version: str, cuda: str | None, libc10: bytes | None) -> bytes:
    """A torch wheel as small as the bump needs: torch/version.py as torch writes it, and a real libc10.so."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "torch/version.py",
            f"from typing import Optional\n__version__ = '{version}'\n"
            f"cuda: Optional[str] = {cuda!r}\nhip: Optional[str] = None\n",
        )
        if libc10 is not None:
            z.writestr("torch/lib/libc10.so", libc10)
        z.writestr(f"torch-{version.split('+')[0]}.dist-info/RECORD", "")
    return buffer.getvalue()


def serve_pip_indexes(url: str) -> None:
    """/simple/torch/: PyPI's PEP 691 page with torch 2.15.0 (cp311-cp315 and free-threaded wheels, both
    platforms), 2.14.1 (in the table) and a CPU-only aarch64 2.10.0; /whl/cu126/torch/: a PyTorch per-CUDA PEP 503
    page with 2.15.0+cu126 on linux-64 and 2.15.0+cu132 (PyPI's, once its row is in). Every wheel on /files/."""
    libs = {arch: real_libc10(arch) for arch in ("x86_64", "aarch64")}
    pypi, html = [], []

    def add(name, version, cuda, arch, listing):
        data = fake_torch_wheel(version, cuda, libs[arch] if cuda else None)
        path = f"/files/{name}"
        RangeHandler.files[path] = (data, "application/octet-stream")
        listing.append((name, url + urllib.parse.quote(path), hashlib.sha256(data).hexdigest(), len(data)))

    for arch in ("x86_64", "aarch64"):
        for tag in (
            "cp311-cp311",
            "cp312-cp312",
            "cp313-cp313",
            "cp314-cp314",
            "cp314-cp314t",
            "cp315-cp315",
            "cp315-cp315t",
        ):
            add(f"torch-{PIP_TORCH}-{tag}-manylinux_2_28_{arch}.whl", PIP_TORCH, "13.2", arch, pypi)
        add(f"torch-2.14.1-cp312-cp312-manylinux_2_28_{arch}.whl", "2.14.1", "13.0", arch, pypi)
    add("torch-2.10.0-cp312-cp312-manylinux_2_28_aarch64.whl", "2.10.0", None, "aarch64", pypi)
    add(f"torch-{PIP_TORCH}-cp312-cp312-win_amd64.whl", PIP_TORCH, "13.2", "x86_64", pypi)  # not Linux: ignored
    for tag in ("cp312-cp312", "cp313-cp313"):
        add(f"torch-{PIP_TORCH}+cu126-{tag}-manylinux_2_28_x86_64.whl", f"{PIP_TORCH}+cu126", "12.6", "x86_64", html)
    add(f"torch-{PIP_TORCH}+cu132-cp312-cp312-manylinux_2_28_x86_64.whl", f"{PIP_TORCH}+cu132", "13.2", "x86_64", html)
    add(
        f"torch-{PIP_TORCH}+cpu-cp312-cp312-manylinux_2_28_x86_64.whl", f"{PIP_TORCH}+cpu", None, "x86_64", html
    )  # CPU: no row, not read
    page = {
        "meta": {"api-version": "1.1"},
        "name": "torch",
        "files": [{"filename": n, "url": u, "hashes": {"sha256": h}, "size": s} for n, u, h, s in pypi],
    }
    RangeHandler.files["/simple/torch/"] = (json.dumps(page).encode(), "application/vnd.pypi.simple.v1+json")
    links = "\n".join(
        f'<a href="{urllib.parse.urlsplit(u).path.replace("+", "%2B")}#sha256={h}">{n}</a><br/>' for n, u, h, _ in html
    )
    RangeHandler.files["/whl/cu126/torch/"] = (
        f"<!DOCTYPE html>\n<html><body><h1>Links for torch</h1>\n{links}\n</body></html>\n".encode(),
        "text/html",
    )


def without_pip_release(project: Path, torch: str) -> None:
    """The checkout before `torch` reached PyPI: its pip rows gone (its kernel-abi row stays: nothing is measured)."""
    path = project / "variants" / "releases.yaml"
    text = path.read_text()
    table = load_releases(path)
    path.write_text(
        dump_releases(
            replace(table, pip_releases=tuple(r for r in table.pip_releases if r.torch != torch)), header_of(text)
        )
    )
    sources = project / "variants" / "torch-sources.yaml"
    sources.write_text(
        sources.read_text().replace(
            "pip_sources:\n",
            "pip_sources:\n  pytorch-cu126:\n    world: pypi\n    index: https://download.pytorch.org/whl/cu126\n",
        )
    )
    assert faforge(project, "generate").returncode == 0


@pytest.mark.slow  # reads torch's libc10.so from PyPI
def test_bump_finds_a_new_pypi_release_reads_its_wheels_and_writes_its_rows(project, tmp_path, wheel_server):
    without_pip_release(project, PIP_TORCH)
    serve_pip_indexes(wheel_server)
    env = {"FAFORGE_CACHE_DIR": str(tmp_path / "cache"), **OFFLINE_ENV}
    before = load_releases(project / "variants" / "releases.yaml")
    assert not [r for r in before.pip_releases if r.torch == PIP_TORCH]
    shown = faforge(project, "bump", "--source", "pypi", "--channel-url", wheel_server + "/simple", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    jsonschema.validate(data, SCHEMA)
    assert load_releases(project / "variants" / "releases.yaml") == before, "without --write nothing changes"
    [row] = data["new_releases"]
    assert (row["world"], row["torch"], row["cuda"], row["cxx11_abi"]) == ("pypi", PIP_TORCH, "13.2", 1)
    assert row["python"] == ["3.11", "3.12", "3.13", "3.14", "3.15"] and row["platforms"] == [
        "linux-64",
        "linux-aarch64",
    ]
    assert row["index"] == "https://pypi.org/simple", "the row names PyPI, not the mirror it was read from"
    assert len(row["source"]) == 10 and not [w for w in row["source"] if "t-manylinux" in w or "win" in w]
    assert data["new_cells"] == [] and len(data["new_pip_cells"]) == 10
    assert "pypi/linux-aarch64/py315/torch2.15/cu132/abi1" in data["new_pip_cells"]

    written = faforge(
        project, "bump", "--source", "pypi", "--channel-url", wheel_server + "/simple", "--write", env=env
    )
    assert written.returncode == 0, written.stderr
    text = (project / "variants" / "releases.yaml").read_text()
    table = load_releases(project / "variants" / "releases.yaml")
    assert dump_releases(table, header_of(text)) == text, "bump must write the canonical form"
    [new] = [r for r in table.pip_releases if r.torch == PIP_TORCH]
    assert (
        new.index is None
        and new.wheel("3.13", "linux-aarch64") == "torch-2.15.0-cp313-cp313-manylinux_2_28_aarch64.whl"
    )
    assert text == (REPO / "variants" / "releases.yaml").read_text(), (
        "the rows read from the wheels are the committed ones"
    )
    check = faforge(project, "generate", "--check")
    assert check.returncode == 0, check.stderr
    assert "pypi/linux-64/py315/torch2.15/cu132/abi1" in (project / "variants" / "linux-64-pypi.yaml").read_text()
    again = faforge(project, "bump", "--source", "pypi", "--channel-url", wheel_server + "/simple", "--json", env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["new_releases"] == [], "nothing new once written"

    # PyTorch's cu126 index (PEP 503 HTML): its 2.15.0+cu126 is a new row with its own index; its +cu132 is PyPI's
    # release.
    cu126 = faforge(
        project,
        "bump",
        "--source",
        "pytorch-cu126",
        "--channel-url",
        wheel_server + "/whl/cu126",
        "--write",
        "--json",
        env=env,
    )
    assert cu126.returncode == 0, cu126.stderr
    data = json.loads(cu126.stdout)
    jsonschema.validate(data, SCHEMA)
    [row] = data["new_releases"]
    assert (row["torch"], row["cuda"], row["cxx11_abi"], row["python"], row["platforms"]) == (
        PIP_TORCH,
        "12.6",
        1,
        ["3.12", "3.13"],
        ["linux-64"],
    )
    assert row["index"] == "https://download.pytorch.org/whl/cu126"
    assert row["source"] == [
        f"torch-{PIP_TORCH}+cu126-cp312-cp312-manylinux_2_28_x86_64.whl",
        f"torch-{PIP_TORCH}+cu126-cp313-cp313-manylinux_2_28_x86_64.whl",
    ]
    assert data["new_pip_cells"] == [
        "pypi/linux-64/py312/torch2.15/cu126/abi1",
        "pypi/linux-64/py313/torch2.15/cu126/abi1",
    ]
    table = load_releases(project / "variants" / "releases.yaml")
    [row] = [r for r in table.pip_releases if r.cuda == "12.6" and r.torch == PIP_TORCH]
    assert row.index == "https://download.pytorch.org/whl/cu126" and table.index_of(row) == row.index
    assert faforge(project, "generate", "--check").returncode == 0
    matrix = faforge(project, "matrix", "--world", "pypi", "--json")
    cell = next(c for c in json.loads(matrix.stdout) if c["id"] == "pypi/linux-64/py312/torch2.15/cu126/abi1")
    assert cell["torch_index"] == "https://download.pytorch.org/whl/cu126" and cell["index_name"] == "torch2.15-cu126"


def test_an_unreachable_pip_source_is_a_clear_error_and_changes_nothing(project):
    before = digests(project)
    result = faforge(project, "bump", "--source", "pypi", "--channel-url", "http://127.0.0.1:9/simple", "--write")
    assert result.returncode == 4 and "cannot read the wheel index http://127.0.0.1:9/simple/torch/" in result.stderr
    assert "Traceback" not in result.stderr and digests(project) == before
