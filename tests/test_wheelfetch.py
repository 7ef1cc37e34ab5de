"""faforge.wheelfetch against a real HTTP server on loopback that serves byte ranges."""

from __future__ import annotations

import http.server
import re
import threading
import zipfile
from pathlib import Path
from typing import ClassVar

import pytest

from faforge.wheelfetch import FetchError, RemoteFile, RemoteZip, fetch_member, pick_wheel


class RangeHandler(http.server.BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}
    honour_ranges = True

    def do_HEAD(self):
        data = self.files.get(self.path)
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()

    def do_GET(self):
        data = self.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if match and self.honour_ranges:
            start, end = int(match[1]), min(int(match[2]), len(data) - 1)
            self.send_response(206)
            data = data[start : end + 1]
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    RangeHandler.honour_ranges = True
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def make_wheel(path: Path, *, zip64: bool) -> dict[str, bytes]:
    """A zip with deflated and stored members; with zip64, more than 65535 entries force the zip64 end records."""
    members = {
        "torch/lib/libc10.so": bytes(range(256)) * 300,
        "torch/__init__.py": b"__version__ = '9.9'\n",
        "torch-9.9.dist-info/RECORD": b"",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for i, (name, data) in enumerate(members.items()):
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED if i % 2 == 0 else zipfile.ZIP_STORED
            with zf.open(info, "w", force_zip64=zip64) as handle:
                handle.write(data)
        for i in range(0x10000 if zip64 else 0):
            zf.writestr(f"filler/{i}", b"")
    tail = path.read_bytes()[-200:]
    assert (b"PK\x06\x06" in tail) == zip64
    return members


@pytest.mark.parametrize("zip64", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_reads_each_member_with_range_requests(server, tmp_path, zip64):
    wheel = tmp_path / "torch-9.9-cp311-cp311-manylinux_2_28_x86_64.whl"
    members = make_wheel(wheel, zip64=zip64)
    RangeHandler.files = {"/w.whl": wheel.read_bytes()}
    remote = RemoteZip(f"{server}/w.whl")
    assert set(members) <= set(remote.members)
    for name, data in members.items():
        assert remote.read(name) == data


def test_fetch_member_caches(server, tmp_path):
    wheel = tmp_path / "w.whl"
    members = make_wheel(wheel, zip64=False)
    RangeHandler.files = {"/w.whl": wheel.read_bytes()}
    remote = RemoteFile("torch-9.9-cp311-cp311-linux_x86_64.whl", f"{server}/w.whl", None, None)
    path = fetch_member(remote, "torch/lib/libc10.so", tmp_path / "cache")
    assert path.read_bytes() == members["torch/lib/libc10.so"]
    RangeHandler.files = {}
    assert fetch_member(remote, "torch/lib/libc10.so", tmp_path / "cache") == path  # no request made


def test_errors_name_the_url_and_the_cause(server, tmp_path):
    wheel = tmp_path / "w.whl"
    make_wheel(wheel, zip64=False)
    RangeHandler.files = {"/w.whl": wheel.read_bytes(), "/text": b"not a zip file at all" * 10}
    with pytest.raises(FetchError, match=re.escape("has no member torch/lib/libtorch.so")):
        RemoteZip(f"{server}/w.whl").read("torch/lib/libtorch.so")
    with pytest.raises(FetchError, match="not a zip file"):
        RemoteZip(f"{server}/text")
    with pytest.raises(FetchError, match="HTTP 404"):
        RemoteZip(f"{server}/missing", size=100)
    RangeHandler.honour_ranges = False
    with pytest.raises(FetchError, match="ignored the range request"):
        RemoteZip(f"{server}/w.whl")


def test_pick_wheel_matches_version_python_and_platform():
    files = [
        RemoteFile(n, "u", None, None)
        for n in (
            "torch-2.7.1-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.7.1-cp311-cp311-manylinux_2_28_aarch64.whl",
            "torch-2.7.10-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.7.1-cp312-cp312-manylinux_2_28_x86_64.whl",
        )
    ]
    assert pick_wheel(files, "2.7.1", "cp311", r"manylinux_2_28_x86_64").filename == files[0].filename
    with pytest.raises(FetchError, match=re.escape("no wheel for version 2.7.2")):
        pick_wheel(files, "2.7.2", "cp311", r"manylinux_2_28_x86_64")
