"""Shared fixtures. Paths resolve from this file, never from the working directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A scratch checkout (variants/, recipes/ and scripts/, whose files the variant files' input digests
    cover: faforge.matrix.inputs) that a test may edit freely."""
    for name in ("variants", "recipes", "scripts"):
        shutil.copytree(REPO / name, tmp_path / name)
    return tmp_path
