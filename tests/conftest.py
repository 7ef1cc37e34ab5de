"""Shared fixtures. Paths resolve from this file, never from the working directory."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from faforge.buildcost.reuse import find_ccache
from faforge.errors import FaforgeError
from tests.support.compile_cache import cxx_through_ccache

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


@pytest.fixture(scope="session")
def glue_cxx_dir(tmp_path_factory) -> Path | None:
    """A PATH entry whose `c++` shares one ccache among the run's real glue builds
    (tests/support/compile_cache.py); None where ccache or c++ is missing (each build then compiles)."""
    try:
        ccache = find_ccache()
    except FaforgeError:
        return None
    cxx = shutil.which("c++")
    base = tmp_path_factory.getbasetemp()
    return cxx_through_ccache(base / "glue-ccache", base, ccache, cxx) if cxx else None


def pytest_sessionfinish(session):
    """Disk: the test cache's two installs of one PyPI torch share their files (tests/support/shared_files.py)."""
    from tests.support.shared_files import share_torch_venvs  # noqa: PLC0415

    shared = [(name, freed) for name, freed in share_torch_venvs() if freed]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if shared and reporter:
        reporter.write_line("test cache: " + ", ".join(f"{name} shares {freed / 2**30:.1f} GiB with the tests' venv" for name, freed in shared))
