"""A static wheel index server on loopback, in its own process, that negotiates as PEP 691 asks: a folder URL
(BASE/torch2.11-cu130/flash-attn/) answers its index.json as application/vnd.pypi.simple.v1+json when the client's
Accept prefers that, and its index.html as text/html otherwise (a plain static server, such as `python -m http.server`
or GitHub Pages, always answers the HTML). Every other path is the file itself. Each request is logged as one JSON line
(method, path, Accept, the type answered), so a test can tell which format pip or uv read.

Run: python -m tests.support.pip_index_server PORT ROOT LOG
"""

from __future__ import annotations

import contextlib
import http.server
import json
import sys
import urllib.parse
from pathlib import Path

from tests.support.http_server import free_port, serve_process

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def preferred(accept: str) -> str:
    """The media type an Accept header prefers among JSON and HTML (q-values; equal q: the order given)."""
    best, best_q = "text/html", -1.0
    for item in accept.split(","):
        kind, *params = [p.strip() for p in item.split(";")]
        q = next((float(p[2:]) for p in params if p.startswith("q=")), 1.0)
        if kind in (JSON_TYPE, "application/vnd.pypi.simple.latest+json"):
            kind = JSON_TYPE
        elif kind not in ("text/html", "application/vnd.pypi.simple.v1+html", "*/*"):
            continue
        if q > best_q:
            best, best_q = (JSON_TYPE if kind == JSON_TYPE else "text/html"), q
    return best


class Handler(http.server.BaseHTTPRequestHandler):
    root: Path
    log: Path

    def do_GET(self):
        self.answer(body=True)

    def do_HEAD(self):
        self.answer(body=False)

    def answer(self, body: bool):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        target = (self.root / path.lstrip("/")).resolve()
        kind = "application/octet-stream"
        if self.root.resolve() not in (target, *target.parents):
            target = None
        elif target.is_dir():
            if not path.endswith("/"):
                return self.reply(301, b"", "text/plain", {"Location": path + "/"}, body)
            kind = JSON_TYPE if preferred(self.headers.get("Accept", "")) == JSON_TYPE else "text/html"
            target = target / ("index.json" if kind == JSON_TYPE else "index.html")
        found = target is not None and target.is_file()
        with open(self.log, "a") as handle:
            handle.write(
                json.dumps(
                    {
                        "method": self.command,
                        "path": path,
                        "accept": self.headers.get("Accept", ""),
                        "type": kind,
                        "status": 200 if found else 404,
                    }
                )
                + "\n"
            )
        if not found:
            return self.reply(404, b"not found\n", "text/plain", {}, body)
        self.reply(200, target.read_bytes(), kind, {}, body)

    def reply(self, code: int, data: bytes, kind: str, headers: dict, body: bool):
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve_index(root: Path, log: Path):
    """The server's base URL, http://127.0.0.1:PORT/, for the length of the block."""
    port = free_port()
    log.touch()
    command = [sys.executable, "-m", "tests.support.pip_index_server", str(port), str(root), str(log)]
    with serve_process(command, f"http://127.0.0.1:{port}/", cwd=Path(__file__).parents[2]) as url:
        yield url


def requests(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def pages_served(log: Path) -> set[str]:
    """The media types the index's pages were answered in (the readiness probe of / and 404s left out)."""
    return {r["type"] for r in requests(log) if r["status"] == 200 and r["path"].endswith("/") and r["path"] != "/"}


if __name__ == "__main__":
    Handler.root, Handler.log = Path(sys.argv[2]), Path(sys.argv[3])
    with http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler) as server:
        server.serve_forever()
