"""A real HTTP server on 127.0.0.1 that misbehaves, one way per path prefix (issue 21).

http://127.0.0.1:PORT/MODE/... answers every request below /MODE/ in that mode:
  hang      accepts the connection, reads the request and never answers
  drip      sends headers promising 1 MB, then one byte a second
  loop      redirects to itself, forever
  reset     closes the connection with a TCP reset before answering
  gzipbomb  200 OK, Content-Encoding: gzip, 64 KiB on the wire that inflate to 64 MiB of zeros
  badjson   200 OK, a body that is not JSON (for repodata.json and every other file)

It runs in threads of the test process: the clients under test are child processes (`faforge` run
as a subprocess with a hard timeout), so the GIL is never held against the server here.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import socket
import struct
import threading
from collections.abc import Iterator

MODES = ("hang", "drip", "loop", "reset", "gzipbomb", "badjson")


def gzip_bomb(inflated: int = 64 << 20) -> bytes:
    return gzip.compress(bytes(inflated), compresslevel=9)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    stop: threading.Event
    bomb: bytes

    def log_message(self, *args) -> None:  # the test's output is the client's, not the server's
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
        mode = self.path.strip("/").split("/", 1)[0]
        try:
            getattr(self, f"_{mode}", self._not_found)()
        except OSError:  # the client gave up: that is what a hostile server wants
            pass

    do_POST = do_PUT = do_HEAD = do_GET  # noqa: N815

    def _not_found(self) -> None:
        self.send_error(404)

    def _hang(self) -> None:
        self.stop.wait()

    def _drip(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(1 << 20))
        self.end_headers()
        while not self.stop.wait(1.0):
            self.wfile.write(b"{")
            self.wfile.flush()

    def _loop(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _reset(self) -> None:
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _gzipbomb(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(self.bomb)))
        self.end_headers()
        self.wfile.write(self.bomb)

    def _badjson(self) -> None:
        body = b'{"info": {"subdir": "linux-64"}, "packages": {"x.tar.bz2": [1, 2,'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serve_hostile() -> Iterator[str]:
    """Yield the server's base URL (no trailing slash); on exit every hanging handler is released."""
    stop = threading.Event()
    handler = type("Handler", (_Handler,), {"stop": stop, "bomb": gzip_bomb()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
