"""PyPI's file listings for tests that read real wheels, fetched once per project and test run."""

from __future__ import annotations

import functools

import pytest

from faforge.wheelfetch import FetchError, RemoteFile, list_files
from tests.support.tiers import slow_work


@functools.cache
def pypi_listing(project: str) -> dict[str, RemoteFile]:
    """File name -> file of `project` on PyPI's Simple API; the calling test skips when it is unreachable."""
    slow_work("PyPI's file listing (tests/support/pypi.py)")
    try:
        return {f.filename: f for f in list_files(project)}
    except FetchError as exc:
        pytest.skip(f"PyPI's Simple API is not reachable ({exc})")
