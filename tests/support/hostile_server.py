"""A hostile HTTP server on loopback, in its own process (as tests.support.http_server explains why).

The first part of a request's path picks the misbehaviour, for every request under it:
  /hang/...      accept, read the request, never answer
  /silent/...    accept, and never read or send a byte
  /drip/...      200 with Content-Length 100000, then one byte a second
  /drip10/...    the same, one byte every 10 s (slower than a short FAFORGE_HTTP_TIMEOUT allows one read)
  /probed/...    404 at once to a HEAD or to a request with a Range header (faforge's probes of a
                 channel or an upload server), silence after reading any other (a server that stalls
                 once the probe has passed)
  /loop/...      302 to the same URL, forever
  /reset/...     close the connection with a TCP reset
  /bomb/...      200, Content-Encoding: gzip, 256 MiB of zeros in ~1 MB
  /badjson/...   200, a body that is not JSON
  /huge/...      200 announcing a 10^12-byte body, then silence
  (the wheel index reader: every page below is a PEP 691 JSON page, valid as an index's root and as a project's)
  /short/...     200 with a Content-Length 1000 bytes more than the body it sends, then a close
  /cut/...       200, chunked: one chunk holding the page, then a close before the last chunk
  /jsontyped/... 200, the page as Content-Type application/json (a type pip skips)
  /escape/...    an index root (a path ending in torchX.Y-cuZZZ/) lists names that climb out of the index or name
                 another host (`..`, `//host`, a scheme, an absolute path); any other path is an empty project page
  /many/...      an index root lists MANY_PROJECTS projects; any other path is an empty project page after MANY_DELAY_S
  /files-MODE/.. the folder given on the command line served as-is (its index, shards), except
                 package files, which get MODE
  /ok            200 "ok" (the readiness probe)

Run: python -m tests.support.hostile_server PORT [FOLDER]
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import socketserver
import struct
import sys
import time
import zlib
from pathlib import Path

from tests.support.http_server import free_port, serve_process

FOREVER_S = 3600
PACKAGES = (".conda", ".tar.bz2")
MAX_BODY = 64 << 20  # read at most this much of an upload
DRIP10_S = 10  # the single-read timeout's case: "a 1-byte-per-10-s drip"
PIP_JSON = "application/vnd.pypi.simple.v1+json"
EMPTY_PAGE = b'{"meta": {"api-version": "1.1"}, "projects": [], "files": []}'  # a root page and a project page at once
INDEX_ROOT = re.compile(r".*/torch[0-9]+\.[0-9]+-cu[0-9]+/")
MANY_PROJECTS = 2000
MANY_DELAY_S = 0.25  # each project page: far below any read timeout, far above the whole index's deadline in total


BOMB_MIB = 256  # four times the largest body cap faforge reads into memory (64 MiB)


def _gzip_bomb() -> bytes:
    """A gzip stream of BOMB_MIB MiB of zeros (about 250 KB)."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    return b"".join([*(compressor.compress(block) for _ in range(BOMB_MIB)), compressor.flush()])


class Handler(socketserver.BaseRequestHandler):
    folder: Path | None = None
    bomb: bytes = b""

    def handle(self):
        if self.silent():
            return
        request = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in request:
                data = self.request.recv(65536)
                if not data:
                    return
                request += data
        self.read_body(request)
        method, path = request.split(b" ", 2)[:2]
        if path.startswith(b"/probed/"):
            return self.probed(request)
        path = path.decode()
        mode, _, rest = path.lstrip("/").partition("/")
        if mode.startswith("files-"):
            served = self.folder / rest.split("?")[0] if self.folder else None
            if served is not None and not served.name.endswith(PACKAGES):
                return self.file(served, method)
            mode = mode.removeprefix("files-")
        with contextlib.suppress(OSError):
            getattr(self, f"mode_{mode}", self.mode_ok)(path)

    def silent(self) -> bool:
        """/silent/: the request is peeked at, never read; the connection stays open and gets no byte."""
        try:
            start = self.request.recv(4096, socket.MSG_PEEK)  # a request line arrives whole on loopback
        except OSError:
            return False
        if b" /silent/" not in start.split(b"\r\n", 1)[0]:
            return False
        time.sleep(FOREVER_S)
        return True

    def probed(self, request: bytes) -> None:
        if request.startswith(b"HEAD ") or b"\r\nrange:" in request.partition(b"\r\n\r\n")[0].lower():
            with contextlib.suppress(OSError):
                self.send("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close")
            return
        time.sleep(FOREVER_S)

    def read_body(self, request: bytes) -> None:
        """Read the request's body (an upload) before answering, as a real server does: answering first
        made the client's outcome a race between sending the rest and reading the answer."""
        head, _, body = request.partition(b"\r\n\r\n")
        fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
        fields = {name.strip().lower(): value.strip().lower() for name, value in fields.items()}
        chunked = fields.get(b"transfer-encoding") == b"chunked"
        length = int(fields.get(b"content-length", b"0") or 0)
        with contextlib.suppress(OSError):
            while (b"0\r\n\r\n" not in body[-16:]) if chunked else len(body) < min(length, MAX_BODY):
                data = self.request.recv(65536)
                if not data:
                    return
                body += data

    def send(self, head: str, body: bytes = b"") -> None:
        self.request.sendall(head.encode() + b"\r\n\r\n" + body)

    def file(self, path: Path, method: bytes) -> None:
        if not path.is_file():
            return self.send("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close")
        body = path.read_bytes()
        self.send(
            f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\nConnection: close", b"" if method == b"HEAD" else body
        )

    def mode_ok(self, path):
        self.send("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close", b"ok")

    def mode_hang(self, path):
        time.sleep(FOREVER_S)

    def mode_silent(self, path):  # under /files-silent/, where the request is read to tell a package from the index
        time.sleep(FOREVER_S)

    def mode_drip(self, path):
        self.send("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nConnection: close")
        for _ in range(FOREVER_S):
            self.request.sendall(b"{")
            time.sleep(1)

    def mode_drip10(self, path):
        self.send("HTTP/1.1 200 OK\r\nContent-Length: 100000\r\nConnection: close")
        for _ in range(FOREVER_S // DRIP10_S):
            self.request.sendall(b"{")
            time.sleep(DRIP10_S)

    def mode_loop(self, path):
        self.send(f"HTTP/1.1 302 Found\r\nLocation: {path}\r\nContent-Length: 0\r\nConnection: close")

    def mode_reset(self, path):
        self.request.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.request.close()

    def mode_bomb(self, path):
        self.send(
            f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(self.bomb)}\r\nConnection: close",
            self.bomb,
        )

    def mode_badjson(self, path):
        self.send(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9\r\nConnection: close", b"{not json"
        )

    def mode_huge(self, path):
        self.send("HTTP/1.1 200 OK\r\nContent-Length: 1000000000000\r\nConnection: close")
        time.sleep(FOREVER_S)

    def page(self, body: bytes = EMPTY_PAGE, kind: str = PIP_JSON, extra: int = 0) -> None:
        self.send(
            f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {len(body) + extra}\r\nConnection: close", body
        )

    def mode_short(self, path):
        self.page(extra=1000)

    def mode_cut(self, path):
        self.send(
            f"HTTP/1.1 200 OK\r\nContent-Type: {PIP_JSON}\r\nTransfer-Encoding: chunked\r\nConnection: close",
            f"{len(EMPTY_PAGE):x}\r\n".encode() + EMPTY_PAGE + b"\r\n",
        )

    def mode_jsontyped(self, path):
        self.page(kind="application/json")

    def mode_escape(self, path):
        if not INDEX_ROOT.fullmatch(path.split("?")[0]):
            return self.page()
        host = f"127.0.0.1:{self.server.server_address[1]}"
        names = [
            "../escaped",
            "../../escaped",
            f"//{host}/escape/escaped",
            f"http://{host}/escape/escaped",
            "/escape/escaped",
            "..",
        ]
        self.page(json.dumps({"meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in names]}).encode())

    def mode_many(self, path):
        if not INDEX_ROOT.fullmatch(path.split("?")[0]):
            time.sleep(MANY_DELAY_S)
            return self.page()
        self.page(
            json.dumps(
                {"meta": {"api-version": "1.1"}, "projects": [{"name": f"p{i}"} for i in range(MANY_PROJECTS)]}
            ).encode()
        )


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextlib.contextmanager
def serve_hostile(folder: Path | None = None):
    """The server's base URL, http://127.0.0.1:PORT, for the length of the block."""
    port = free_port()
    command = [sys.executable, "-m", "tests.support.hostile_server", str(port), *([str(folder)] if folder else [])]
    with serve_process(command, f"http://127.0.0.1:{port}/ok", cwd=Path(__file__).parents[2]):
        yield f"http://127.0.0.1:{port}"


if __name__ == "__main__":
    Handler.folder = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    Handler.bomb = _gzip_bomb()
    with Server(("127.0.0.1", int(sys.argv[1])), Handler) as server:
        server.serve_forever()
