"""`faforge publish`: gates per exact sha256, never overwrite without --force, tokens only from the
environment and never printed. Packages are real .conda files assembled with py-rattler-build;
uploads go over real HTTP to fake prefix.dev, quetz, artifactory and anaconda.org servers on loopback
(each in its own process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.channel.local import PackageSpec, assemble
from faforge.channel.repodata import query
from faforge.release.manifest import record
from faforge.release.package import read_package
from faforge.release.publish.channel import judge
from tests.support.http_server import free_port, serve_process

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "publish.json").read_text())
BUILD = "py311_torch2_14_cu130_cxx11abi1_h1234567_0"
TOKEN = "pfx-secret-0123456789abcdef"

# A stand-in for an upload server (prefix.dev, quetz, artifactory): logs each request (with its
# credential header) and answers uploads with the status given on its command line; on errors it
# echoes the credential back, as careless servers do, so faforge must scrub it from what it prints.
# HEAD finds a file only once it was PUT (artifactory's existence check).
FAKE_SERVER = r"""
import http.server, json, sys
status, log = int(sys.argv[1]), sys.argv[3]
stored = set()
class Handler(http.server.BaseHTTPRequestHandler):
    def body(self):
        # An upload streamed without Content-Length comes chunked: read it whole before answering, as a
        # real server does (answering first and closing raced the client's send: "error sending request").
        if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = b""
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            data += self.rfile.read(size)
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        return data
    def handle_one(self):
        body = self.body()
        auth = self.headers.get("Authorization") or self.headers.get("X-API-Key") or ""
        with open(log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path, "auth": auth, "bytes": len(body)}) + "\n")
        code = status if self.command in ("POST", "PUT") else 200
        if self.command == "HEAD":
            code = 200 if self.path in stored else 404
        elif self.command == "PUT" and status < 400:
            stored.add(self.path)
        reply = json.dumps({"detail": "rejected credentials " + auth} if code >= 400 else {}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)
    do_GET = do_POST = do_PUT = do_HEAD = handle_one
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Handler).serve_forever()
"""


def package(directory: Path, text: str = "one") -> Path:
    return assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            BUILD,
            "linux-64",
            depends=("python 3.11.*",),
            files={"share/flash-attn-standin.txt": text},
        ),
        directory,
    )


def faforge(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600
    )


def passed(manifest: Path, path: Path, gates=("abi", "import", "gpu"), result="passed") -> None:
    facts = read_package(path)
    for gate in gates:
        record(manifest, facts, gate, result, "test")


def test_gates_are_judged_for_the_exact_file(tmp_path):
    manifest = tmp_path / "verification"
    one, two = package(tmp_path / "a", "one"), package(tmp_path / "b", "two")
    assert one.name == two.name
    passed(manifest, one, ("abi", "import"))
    record(manifest, read_package(one), "gpu", "skipped", "no CUDA device")
    assert judge(read_package(one), manifest, ("abi", "import")).allowed
    refused = judge(read_package(one), manifest, ("abi", "import", "gpu"))
    assert not refused.allowed and refused.reason == "gpu: skipped"
    other = judge(read_package(two), manifest, ("abi",))
    assert not other.allowed and other.reason == "abi: not run", (
        "results of another file with the same name must not count"
    )


def test_a_failed_gate_refuses_whatever_is_required(tmp_path):
    manifest = tmp_path / "verification"
    path = package(tmp_path / "a")
    passed(manifest, path, ("import", "gpu"))
    record(manifest, read_package(path), "abi", "failed", "abi-mismatch")
    for required in [("gpu",), ("import",), ()]:
        decision = judge(read_package(path), manifest, required)
        assert not decision.allowed and decision.reason.startswith("abi: failed")


def test_folder_channel_never_overwrites_without_force(tmp_path):
    manifest, channel = tmp_path / "verification", tmp_path / "channel"
    one, two = package(tmp_path / "a", "one"), package(tmp_path / "b", "two")
    passed(manifest, one)
    passed(manifest, two)
    dry = faforge("publish", str(one), "--manifest", str(manifest), "--to", str(channel), "--dry-run", "--json")
    assert dry.returncode == 0 and json.loads(dry.stdout)["packages"][0]["action"] == "would-publish"
    assert not channel.exists()
    first = faforge("publish", str(one), "--manifest", str(manifest), "--to", str(channel), "--json")
    assert first.returncode == 0, first.stderr
    jsonschema.validate(json.loads(first.stdout), SCHEMA)
    assert [str(r.file_name) for r in query(channel, ["flash-attn"], ["linux-64"])] == [one.name], (
        "indexed with py-rattler"
    )
    same = faforge("publish", str(one), "--manifest", str(manifest), "--to", str(channel), "--json")
    assert json.loads(same.stdout)["packages"][0]["action"] == "unchanged"
    clash = faforge("publish", str(two), "--manifest", str(manifest), "--to", str(channel))
    assert clash.returncode == 1 and "exists" in clash.stdout and "pass --force" in clash.stdout
    assert (channel / "linux-64" / one.name).read_bytes() == one.read_bytes()
    forced = faforge("publish", str(two), "--manifest", str(manifest), "--to", str(channel), "--force")
    assert forced.returncode == 0
    assert (channel / "linux-64" / one.name).read_bytes() == two.read_bytes()
    assert [str(r.sha256.hex()) for r in query(channel, ["flash-attn"], ["linux-64"])] == [read_package(two).sha256]


def test_default_target_is_the_local_channel_folder(tmp_path):
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    result = faforge("publish", str(one), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "channel" / "linux-64" / one.name).is_file()
    assert (tmp_path / "channel" / "linux-64" / "repodata.json").is_file()


@pytest.fixture
def fake_prefix(tmp_path):
    def start(status: int):
        port, log = free_port(), tmp_path / f"requests-{status}.jsonl"
        script = tmp_path / "fake_server.py"
        script.write_text(FAKE_SERVER)
        return serve_process(
            [sys.executable, str(script), str(status), str(port), str(log)], f"http://127.0.0.1:{port}/"
        ), log

    return start


@pytest.mark.parametrize("status", [200, 500])
def test_upload_token_comes_from_the_environment_and_is_never_printed(tmp_path, fake_prefix, status):
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    server, log = fake_prefix(status)
    with server as url:
        env = dict(os.environ, PREFIX_API_KEY=TOKEN)
        result = faforge("publish", str(one), "--manifest", str(manifest), "--to", f"prefix:{url}my-channel", env=env)
    # (the first GET / is the fixture's readiness probe)
    requests = [r for r in map(json.loads, log.read_text().splitlines()) if r["method"] == "POST"]
    assert requests and all(r["auth"] == f"Bearer {TOKEN}" for r in requests), "the token must reach the server"
    assert requests[0]["path"] == "/api/v1/upload/my-channel" and requests[0]["bytes"] >= one.stat().st_size
    probes = [r for r in map(json.loads, log.read_text().splitlines()) if r["method"] == "HEAD"]
    assert probes == [{"method": "HEAD", "path": "/", "auth": "", "bytes": 0}], (
        "one probe of the server's root, without the token"
    )
    output = result.stdout + result.stderr
    assert TOKEN not in output
    if status == 200:
        assert result.returncode == 0 and "published" in result.stdout
    else:
        assert result.returncode == 4 and "upload to prefix:" in result.stderr and "***" in result.stderr


# py-rattler-build's upload protocols: quetz POSTs to its channel API with X-API-Key, artifactory
# PUTs the file under the channel URL with a bearer token.
SERVERS = {
    "quetz": ("QUETZ_API_KEY", "POST", "/api/channels/my-channel/upload/", TOKEN),
    "artifactory": ("ARTIFACTORY_TOKEN", "PUT", "/artifactory/api/conda/my-channel/linux-64/", f"Bearer {TOKEN}"),
}


@pytest.mark.parametrize("kind", sorted(SERVERS))
@pytest.mark.parametrize("status", [200, 500])
def test_other_servers_get_the_token_from_the_environment_and_never_print_it(tmp_path, fake_prefix, kind, status):
    variable, method, path, credential = SERVERS[kind]
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    server, log = fake_prefix(status)
    channel = "artifactory/api/conda/my-channel" if kind == "artifactory" else "my-channel"
    with server as url:
        result = faforge(
            "publish",
            str(one),
            "--manifest",
            str(manifest),
            "--to",
            f"{kind}:{url}{channel}",
            env=dict(os.environ, **{variable: TOKEN}),
        )
    uploads = [r for r in map(json.loads, log.read_text().splitlines()) if r["method"] == method]
    assert uploads and uploads[0]["path"].startswith(path), uploads
    assert one.name in uploads[0]["path"] or uploads[0]["bytes"] >= one.stat().st_size
    assert all(r["auth"] == credential for r in uploads), "the token must reach the server"
    output = result.stdout + result.stderr
    assert TOKEN not in output and "Traceback" not in output
    if status == 200:
        assert result.returncode == 0 and "published" in result.stdout, output
    else:
        assert result.returncode == 4 and f"upload to {kind}:" in result.stderr, output


def test_artifactory_replaces_a_file_only_with_force(tmp_path, fake_prefix):
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    server, log = fake_prefix(200)
    env = dict(os.environ, ARTIFACTORY_TOKEN=TOKEN)
    with server as url:
        target = f"artifactory:{url}artifactory/api/conda/my-channel"
        first = faforge("publish", str(one), "--manifest", str(manifest), "--to", target, env=env)
        again = faforge("publish", str(one), "--manifest", str(manifest), "--to", target, env=env)
        forced = faforge("publish", str(one), "--manifest", str(manifest), "--to", target, "--force", env=env)
    assert first.returncode == 0, first.stderr
    assert again.returncode == 1 and "already on" in again.stderr and "--force" in again.stderr
    assert forced.returncode == 0, forced.stderr
    puts = [r for r in map(json.loads, log.read_text().splitlines()) if r["method"] == "PUT"]
    assert len(puts) == 2, "the refused publish uploads nothing"
    assert all(r["bytes"] == one.stat().st_size for r in puts), "each upload carries the whole package"


# anaconda.org's API as rattler-build's anaconda upload speaks it (prefix-dev/rattler-build,
# src/upload/anaconda.rs): package and release are looked up (404) and created, the file is staged
# (409 when it exists), posted to the storage URL the stage returns, then committed; --force
# deletes the existing file first.
FAKE_ANACONDA = r"""
import http.server, json, sys
port, log = int(sys.argv[1]), sys.argv[2]
created, files = set(), set()
class Handler(http.server.BaseHTTPRequestHandler):
    def reply(self, code, body=None):
        data = json.dumps(body or {}).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def handle_one(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(log, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "auth": self.headers.get("Authorization", ""), "bytes": len(body)}) + "\n")
        kind, _, rest = self.path.strip("/").partition("/")
        if kind in ("package", "release"):
            if self.command == "GET":
                return self.reply(200 if self.path in created else 404)
            created.add(self.path)
            return self.reply(200)
        if kind == "stage":
            if rest in files:
                return self.reply(409, {"error": "exists"})
            return self.reply(200, {"post_url": f"http://127.0.0.1:{port}/storage", "form_data": {"key": rest},
                                    "dist_id": "dist-1"})
        if kind == "commit":
            files.add(rest)
        if kind == "dist" and self.command == "DELETE":
            files.discard(rest)
        self.reply(200)
    do_GET = do_POST = do_PATCH = do_DELETE = handle_one
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_anaconda_upload_stages_stores_commits_and_replaces_only_with_force(tmp_path):
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    port, log = free_port(), tmp_path / "anaconda.jsonl"
    script = tmp_path / "fake_anaconda.py"
    script.write_text(FAKE_ANACONDA)
    env = dict(os.environ, ANACONDA_API_KEY=TOKEN)
    with serve_process([sys.executable, str(script), str(port), str(log)], f"http://127.0.0.1:{port}/") as url:
        target = f"anaconda:{url}faforge/dev"
        first = faforge("publish", str(one), "--manifest", str(manifest), "--to", target, env=env)
        again = faforge("publish", str(one), "--manifest", str(manifest), "--to", target, env=env)
        forced = faforge("publish", str(one), "--manifest", str(manifest), "--to", target, "--force", env=env)
    requests = [json.loads(line) for line in log.read_text().splitlines()]
    api = [r for r in requests if r["path"] != "/storage" and r["path"] != "/"]
    assert first.returncode == 0 and "published" in first.stdout, first.stderr
    assert all(r["auth"] == f"token {TOKEN}" for r in api), "the token reaches the API"
    stage = f"/stage/faforge/flash-attn/2.8.3.post2/linux-64/{one.name}"
    assert [r["path"] for r in api if r["method"] == "POST"][:4] == [
        "/package/faforge/flash-attn",
        "/release/faforge/flash-attn/2.8.3.post2",
        stage,
        f"/commit/faforge/flash-attn/2.8.3.post2/linux-64/{one.name}",
    ]
    assert any(r["path"] == "/storage" and r["bytes"] >= one.stat().st_size for r in requests), (
        "the file itself is stored"
    )
    assert again.returncode == 1 and "already exists" in again.stderr and "Traceback" not in again.stderr
    assert forced.returncode == 0, forced.stderr
    assert any(r["method"] == "DELETE" for r in requests), "--force replaces the existing file"
    commits = [r for r in requests if r["path"].startswith("/commit/")]
    assert len(commits) == 2, "the forced publish stores the file again after deleting it"
    for result in (first, again, forced):
        assert TOKEN not in result.stdout + result.stderr


def test_missing_token_names_the_variable_and_uploads_nothing(tmp_path, fake_prefix):
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    server, log = fake_prefix(200)
    with server as url:
        env = {k: v for k, v in os.environ.items() if k != "PREFIX_API_KEY"}
        result = faforge("publish", str(one), "--manifest", str(manifest), "--to", f"prefix:{url}my-channel", env=env)
    assert result.returncode == 2 and "PREFIX_API_KEY" in result.stderr and "Traceback" not in result.stderr
    assert not log.exists() or all(json.loads(line)["method"] != "POST" for line in log.read_text().splitlines())


def test_file_url_needs_an_absolute_path_and_never_means_the_current_folder(tmp_path):
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    work = tmp_path / "cwd"
    work.mkdir()
    for url in ("file://", "file://channel", "file://host/channel"):
        result = faforge("publish", str(one), "--manifest", str(manifest), "--to", url, cwd=work)
        assert (
            result.returncode == 2 and "file:///ABSOLUTE/PATH" in result.stderr and "Traceback" not in result.stderr
        ), result.stderr
    assert not list(work.iterdir()), "nothing is written into the current folder"
    channel = tmp_path / "my channel"
    result = faforge("publish", str(one), "--manifest", str(manifest), "--to", channel.as_uri(), cwd=work)
    assert result.returncode == 0, result.stderr
    assert (channel / "linux-64" / one.name).is_file() and not list(work.iterdir())


@pytest.mark.parametrize(
    "to",
    [
        f"prefix:https://user:{TOKEN}@prefix.dev/my-channel",
        f"prefix:https://{TOKEN}@prefix.dev/my-channel",
        f"quetz:https://quetz.example/my-channel?api_key={TOKEN}",
        f"https://user:{TOKEN}@example.org/channel",
        f"file://user:{TOKEN}@/tmp/channel",
    ],
    ids=["user-info", "bare-user-info", "query", "unknown-kind", "file-url"],
)
def test_a_token_in_the_url_is_refused_and_never_printed(tmp_path, to):
    manifest = tmp_path / "verification"
    one = package(tmp_path / "a")
    passed(manifest, one)
    for extra in ([], ["--json"], ["--dry-run"]):
        result = faforge(
            "publish",
            str(one),
            "--manifest",
            str(manifest),
            "--to",
            to,
            *extra,
            env=dict(os.environ, PREFIX_API_KEY=TOKEN),
        )
        output = result.stdout + result.stderr
        assert result.returncode == 2 and "Traceback" not in output, output
        assert TOKEN not in output and "***" in output, output


def test_unverified_package_is_refused_with_the_reason(tmp_path):
    one = package(tmp_path / "a")
    result = faforge("publish", str(one), "--manifest", str(tmp_path / "none"), "--to", str(tmp_path / "channel"))
    assert result.returncode == 1
    assert "abi: not run; import: not run; gpu: not run" in result.stdout
    assert not (tmp_path / "channel").exists()
