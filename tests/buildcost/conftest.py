"""Fixtures for the build-cost tests: the build script loaded as a module."""

from __future__ import annotations

import pytest

from faforge import build_script


@pytest.fixture(scope="session")
def script():
    return build_script.load()
