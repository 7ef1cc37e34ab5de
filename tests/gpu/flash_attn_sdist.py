"""The real flash-attn 2.8.3.post2 sdist, downloaded once into the test cache (tests/support/cache.py).

Needed by tests/gpu/test_kernel_coverage.py, which checks the dispatch emulation against flash_api.cpp and
the TU table against the sdist's kernel files. Fetched with faforge.wheelfetch from PyPI's Simple API (pip
download would run the sdist's setup.py, which imports torch); only csrc/flash_attn is unpacked.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import tarfile
from pathlib import Path

from faforge.wheelfetch import FetchError, http_get, list_files
from tests.support.cache import cache_dir
from tests.support.tiers import slow_work

FILENAME = "flash_attn-2.8.3.post2.tar.gz"
SHA256 = "d0f9f0b08a986cdeadbffcf5ec8b3a8f514366c68ad1853d3ab061bc83cc340b"  # PyPI's listing, checked on download
ROOT = "flash_attn-2.8.3.post2"


class SdistUnavailable(Exception):
    """No cached copy and no way to download it; tests skip with this text."""


def flash_attn_sdist() -> Path:
    """The unpacked sdist's root (csrc/flash_attn only), downloading it on first use."""
    slow_work("the flash-attn sdist from PyPI (tests/gpu/flash_attn_sdist.py)")
    folder = cache_dir("flash-attn-sdist")
    root = folder / ROOT
    if (root / "csrc/flash_attn/flash_api.cpp").is_file():
        return root
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "csrc/flash_attn/flash_api.cpp").is_file():
            try:
                remote = next(f for f in list_files("flash-attn") if f.filename == FILENAME)
                data = http_get(remote.url)
            except (FetchError, StopIteration) as exc:
                raise SdistUnavailable(f"cannot download {FILENAME} from PyPI: {exc}") from None
            if hashlib.sha256(data).hexdigest() != SHA256:
                raise SdistUnavailable(
                    f"{FILENAME} from PyPI has sha256 {hashlib.sha256(data).hexdigest()}, expected {SHA256}"
                )
            with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                members = [
                    m for m in archive.getmembers() if m.name.startswith(f"{ROOT}/csrc/flash_attn/") and m.isfile()
                ]
                archive.extractall(folder, members=members, filter="data")
    return root
