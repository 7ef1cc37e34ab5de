"""A real HTTP server on loopback, in its own process: `python -m http.server`, as the README tells
users to serve a channel folder.

Its own process matters: py-rattler-build's upload functions hold the GIL while they wait on the
network, so a server thread inside the test process would never answer them.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server for {url} exited with {process.returncode}: {process.stderr.read() if process.stderr else ''}"
            )
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answers, even if not with 200
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"no answer from {url} after {timeout}s")


@contextlib.contextmanager
def serve_process(command: list[str], url: str, cwd: Path | None = None):
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_up(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stderr.close()


@contextlib.contextmanager
def serve_directory(directory: Path, port: int | None = None):
    """Serve `directory` at http://127.0.0.1:PORT/ with Python's own http.server."""
    port = port or free_port()
    command = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(directory), str(port)]
    with serve_process(command, f"http://127.0.0.1:{port}/") as url:
        yield url
