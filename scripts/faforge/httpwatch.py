"""A deadline for a whole HTTP request, which a socket timeout cannot give, and the opener that carries it.

A socket timeout bounds the connect and each single read: a server that drips one byte a second never trips
it. A watch shuts a request's sockets down when its deadline passes, whatever the server is doing, which
wakes any blocked read; the opener installs it on every connection it makes, speaks http(s) only (a
redirect to file:// or ftp:// is refused) and follows at most MAX_REDIRECTS redirects. faforge.httpclient,
the one HTTP client, makes each request through them.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.request

MAX_REDIRECTS = 10


class Watch:
    """Shuts down the sockets of one request when its deadline passes, which wakes any blocked read."""

    def __init__(self, seconds: float):
        self.sockets: list[socket.socket] = []
        self.fired = False
        self.lock = threading.Lock()
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def add(self, sock: socket.socket) -> None:
        with self.lock:
            self.sockets.append(sock)
            if self.fired:
                _shutdown(sock)

    def _fire(self) -> None:
        with self.lock:
            self.fired = True
            for sock in self.sockets:
                _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _watched(base: type[http.client.HTTPConnection], watch: Watch) -> type[http.client.HTTPConnection]:
    class Watched(base):  # type: ignore[valid-type,misc]  # the base is a parameter: HTTPConnection or HTTPSConnection
        def connect(self):
            super().connect()
            watch.add(self.sock)

    return Watched


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, watch: Watch):
        super().__init__()
        self.connection = _watched(http.client.HTTPConnection, watch)

    def http_open(self, req):
        return self.do_open(self.connection, req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, watch: Watch):
        super().__init__()
        self.connection = _watched(http.client.HTTPSConnection, watch)

    def https_open(self, req):
        context = self._context  # type: ignore[attr-defined]  # HTTPSHandler's own, undeclared in typeshed
        return self.do_open(self.connection, req, context=context)


class _Redirects(urllib.request.HTTPRedirectHandler):
    max_redirections = MAX_REDIRECTS


def opener(watch: Watch) -> urllib.request.OpenerDirector:
    """http(s) only (a redirect to file:// or ftp:// is refused), through the environment's proxies."""
    opener = urllib.request.OpenerDirector()
    for handler in (
        urllib.request.ProxyHandler(),
        _HTTP(watch),
        _HTTPS(watch),
        urllib.request.HTTPDefaultErrorHandler(),
        _Redirects(),
        urllib.request.HTTPErrorProcessor(),
        urllib.request.UnknownHandler(),
    ):
        opener.add_handler(handler)
    return opener
