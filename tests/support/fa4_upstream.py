"""Upstream's FlashAttention-4 wheel of the data file's release row, as PyPI serves it (568 KB): downloaded once,
sha256-checked against the row, kept in the test cache. For the tests that repack it (tests/fa4, tests/pipworld)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from faforge.families.flash_attn_4 import sets
from faforge.family import FLASH_ATTN_4
from faforge.wheelfetch import http_get, save
from tests.support.cache import cache_dir
from tests.support.pinned_wheels import listed
from tests.support.tiers import slow_work


def upstream_wheel(version: str | None = None) -> Path:
    """The wheel of release `version` (default: the data file's newest) in the test cache."""
    slow_work(f"upstream's {FLASH_ATTN_4.package} wheel (tests/support/fa4_upstream.py)")
    releases = sets.load().releases
    release = next(r for r in releases if version in (None, r.version))
    target = cache_dir("fa4-upstream") / release.wheel
    if not target.is_file() or hashlib.sha256(target.read_bytes()).hexdigest() != release.sha256:
        data = http_get(listed(FLASH_ATTN_4.package, release.wheel, release.sha256).url, kind="package")
        assert hashlib.sha256(data).hexdigest() == release.sha256, release.wheel
        save(target, data)
    return target
