"""Clean pip environments for the gates of a wheel (the pip world): real pip, our wheels over HTTP, PyPI's torch.

  * loopback_index: a staging index of exactly the wheels under test, written by faforge.pipindex's own page
    renderer (PEP 503 HTML with sha256 links and data-requires-python, the PEP 691 JSON, PEP 658 metadata)
    into a temporary root and served on 127.0.0.1 by a stdlib http.server thread, as any static server
    serves the published index; pip reads it over HTTP, checking every file against its link's sha256;
  * venv_copy: a brand-new venv that is a hardlink copy of a cached base venv (faforge.release.clean_env: PyPI's
    torch, installed by pip once per torch and Python): its own pyvenv.cfg and bin/python make it a venv of
    its own, at the cost of links only; pip adds files to it and never writes into the shared ones (an
    uninstall or upgrade unlinks the copy's link, never the cached file);
  * pip_install: `python -m pip install` in such a venv from that index, PyPI as the extra index, with no
    user configuration (PIP_* and pip.conf ignored): what a user's install line does, minus the torch
    download, because the venv already holds the torch it pins;
  * pip_target: this machine's pip installs wheels of another platform into a folder (`--platform ...
    --target DIR --only-binary=:all: --no-deps`), for the emulated import of an aarch64 wheel.
Everything returns plain data; faforge.release.verify.wheel_venv, wheel_kernel_gates and wheel_emulation judge it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from faforge import config
from faforge.pipindex.folder import core_metadata
from faforge.pipindex.layout import FILES
from faforge.pipindex.pages import Link, index_pages, metadata_name
from faforge.pipwheel.facts import WheelFacts
from faforge.pipwheel.members import check_members

LOOPBACK = "127.0.0.1"
PIP_TIMEOUT_S = 1800  # a first install may fetch a missing dependency from PyPI; our wheels come from loopback
INSTALLED = re.compile(r"^Successfully installed (?P<what>.+)$", re.MULTILINE)


@contextlib.contextmanager
def unpacked_wheels(*wheels: WheelFacts) -> Iterator[Path]:
    """A temporary folder holding the members of `wheels`, as pip lays them out in site-packages (no
    dist-info scripts run; the members were checked by faforge.pipwheel.facts' rules first)."""
    with tempfile.TemporaryDirectory(prefix="faforge-wheel-") as tmp:
        for wheel in wheels:
            with zipfile.ZipFile(wheel.path) as archive:
                check_members(archive, str(wheel.path))
                archive.extractall(tmp)
        yield Path(tmp)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@contextlib.contextmanager
def serve(root: Path) -> Iterator[str]:
    """`root` served read-only on loopback by a thread (http://127.0.0.1:PORT), for as long as the context lasts."""
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name="faforge-loopback-index", daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def write_staging_index(root: Path, index: str, wheels: Sequence[WheelFacts]) -> None:
    """ROOT/files/W (each wheel, linked or copied), W.metadata and the pages of `index` listing exactly `wheels`."""
    files = root / FILES
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list[Link]] = {}
    for wheel in wheels:
        _link_or_copy(Path(wheel.path).absolute(), files / wheel.filename)
        metadata = core_metadata(wheel)
        (files / metadata_name(wheel.filename)).write_bytes(metadata)
        projects.setdefault(wheel.name, []).append(
            Link(
                filename=wheel.filename,
                sha256=wheel.sha256,
                size=wheel.size,
                version=wheel.version,
                requires_python=wheel.requires_python,
                metadata_sha256=hashlib.sha256(metadata).hexdigest(),
            )
        )
    for rel, data in index_pages(index, projects).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


@contextlib.contextmanager
def loopback_index(index: str, wheels: Sequence[WheelFacts]) -> Iterator[str]:
    """The index URL (http://127.0.0.1:PORT/INDEX/) of a staging index of exactly `wheels`, while the context lasts."""
    with tempfile.TemporaryDirectory(prefix="faforge-staging-index-") as tmp:
        write_staging_index(Path(tmp), index, wheels)
        with serve(Path(tmp)) as base:
            yield f"{base}/{index}/"


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed there
        shutil.copyfile(source, target)


def _hardlink(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


@contextlib.contextmanager
def venv_copy(base: Path) -> Iterator[Path]:
    """A temporary venv that is a hardlink copy of the venv at `base` (on its file system, under faforge's cache)."""
    root = config.cache_dir() / "clean-venvs"
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="venv-", dir=root) as tmp:
        prefix = Path(tmp) / base.name
        shutil.copytree(base, prefix, symlinks=True, copy_function=_hardlink)
        yield prefix


def site_packages(prefix: Path) -> Path:
    return next((prefix / "lib").glob("python3*/site-packages"))


def clean_pip_env() -> dict[str, str]:
    """This process's environment without pip's or Python's settings: no pip.conf, no PIP_INDEX_URL, no user site."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "PYTHON")) and k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")
    }
    return {
        **env,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_INPUT": "1",
        "PYTHONNOUSERSITE": "1",
    }


@dataclass(frozen=True)
class PipRun:
    """What one pip install did: its command, exit status and output, and what it says it installed."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def installed(self) -> dict[str, str]:
        """Normalised name -> version of everything pip says it installed ("Successfully installed a-1 b-2")."""
        match = INSTALLED.search(self.stdout)
        found: dict[str, str] = {}
        for item in match["what"].split() if match else []:
            name, _, version = item.rpartition("-")
            found[canonicalize_name(name)] = version
        return found

    def errors(self, limit: int = 600) -> str:
        """pip's ERROR lines (its resolver's words), else its last line."""
        lines = [line.strip() for line in (self.stderr + "\n" + self.stdout).splitlines() if line.strip()]
        picked = [line for line in lines if line.startswith("ERROR:")] or lines[-1:] or [f"exit {self.returncode}"]
        text = " / ".join(picked)
        return text if len(text) <= limit else text[:limit] + "…"


def _run_pip(command: list[str], cwd: Path) -> PipRun:
    started = time.monotonic()
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=clean_pip_env(), cwd=cwd
        )
        code, out, err = result.returncode, result.stdout, result.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = 124, str(exc.stdout or ""), f"ERROR: pip did not finish in {PIP_TIMEOUT_S} s"
    return PipRun(tuple(command), code, out, err, time.monotonic() - started)


def pip_install(python: Path, requirements: Sequence[str], *, index_url: str, extra_index_url: str | None) -> PipRun:
    """`python -m pip install REQUIREMENTS` from `index_url` (and `extra_index_url`), binaries only, no cache."""
    extra = ["--extra-index-url", extra_index_url] if extra_index_url else []
    command = [
        str(python),
        "-m",
        "pip",
        "install",
        "--no-cache-dir",
        "--only-binary",
        ":all:",
        "--index-url",
        index_url,
        *extra,
        *requirements,
    ]
    return _run_pip(command, python.parent)


def pip_install_file(python: Path, wheel: Path) -> PipRun:
    """`python -m pip install --no-deps --no-index WHEEL`: pip's
    own checks of a wheel file (tags, RECORD), nothing fetched."""
    return _run_pip(
        [str(python), "-m", "pip", "install", "--no-cache-dir", "--no-deps", "--no-index", str(Path(wheel).absolute())],
        python.parent,
    )


def pip_target(
    target: Path, requirements: Sequence[str], *, index_url: str, platforms: Sequence[str], python: str, abi: str | None
) -> PipRun:
    """This machine's pip installs `requirements` for another platform into `target` (no dependencies: the
    target machine's torch is given apart), as `pip install --platform ... --target` does for a cross install."""
    tags = [arg for p in platforms for arg in ("--platform", p)]
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-cache-dir",
        "--no-deps",
        "--only-binary=:all:",
        "--target",
        str(target),
        *tags,
        "--python-version",
        python,
        "--implementation",
        "cp",
        *(["--abi", abi] if abi else []),
        "--index-url",
        index_url,
        *requirements,
    ]
    return _run_pip(command, target.parent)
