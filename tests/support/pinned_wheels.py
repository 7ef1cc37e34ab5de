"""Real wheels from PyPI, pinned by sha256, downloaded whole once and unpacked into the test cache.

For tests that read third-party binaries as pip lays them out (the ABI gate's real-binary sets). The
listing's sha256 must be the pinned one and the downloaded bytes must hash to it; a PyPI that cannot be
reached skips the calling test, unless the wheel is cached already.
"""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

from faforge.wheelfetch import FetchError, RemoteFile, http_get, list_files
from tests.support.tiers import slow_work


def listed(project: str, wheel: str, sha256: str) -> RemoteFile:
    """PyPI's file `wheel` of `project`, whose listed sha256 must be `sha256`."""
    try:
        files = {f.filename: f for f in list_files(project)}
    except FetchError as exc:
        pytest.skip(f"PyPI's Simple API is not reachable ({exc}) and {wheel} is not cached")
    remote = files[wheel]
    assert remote.sha256 == sha256, f"{wheel}: PyPI lists sha256 {remote.sha256}, pinned {sha256}"
    return remote


def unpacked_wheel(project: str, wheel: str, sha256: str, cache: Path) -> Path:
    """The whole wheel, sha256-checked, unpacked into CACHE/<wheel>/ (its site-packages layout)."""
    slow_work("a pinned PyPI wheel (tests/support/pinned_wheels.py)")
    folder = cache / wheel
    done = folder / ".complete"
    if not done.exists():
        data = http_get(listed(project, wheel, sha256).url)
        assert hashlib.sha256(data).hexdigest() == sha256, wheel
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        archive = folder.with_suffix(".part")
        archive.write_bytes(data)
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(folder)
        archive.unlink()
        done.write_text(sha256 + "\n")
    return folder
