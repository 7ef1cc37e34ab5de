"""Shared fixtures. Paths resolve from this file, never from the working directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from faforge.bench.cache_reuse import find_ccache
from faforge.errors import FaforgeError
from tests.support import tiers
from tests.support.compile_cache import cxx_through_ccache
from tests.support.shared_files import share_torch_venvs

REPO = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    group = parser.getgroup("faforge tiers", "the two test tiers (tests/support/tiers.py)")
    group.addoption(
        "--fast",
        action="store_true",
        help=f"run only the fast tier: no download, compile, world or PyPI, each test within {tiers.FAST_TIMEOUT_S} s",
    )
    group.addoption("--slow", action="store_true", help="run only what --fast leaves out")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "slow: downloads, compiles, makes a venv or a world, or reads PyPI: left out of "
        "--fast, run by --slow (tests/support/tiers.py)",
    )
    # pytest-xdist registers it too; here for a run with `-p no:xdist` (--strict-markers)
    config.addinivalue_line("markers", "xdist_group(name): under --dist loadgroup, these tests run on one worker")
    if config.getoption("fast") and config.getoption("slow"):
        raise pytest.UsageError("--fast and --slow pick complementary tiers; give one (neither runs both)")
    if config.getoption("fast"):
        if config.getoption("timeout", None) is None:
            config.option.timeout = tiers.FAST_TIMEOUT_S
        config.stash[FAST_PATCH] = patch = pytest.MonkeyPatch()
        tiers.enter_fast_tier(patch)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; absent under -p no:xdist
def pytest_xdist_auto_num_workers(config):
    """`-n auto` in the fast tier: one worker more than cores, to fill the waits of the tests that wait for a
    child's timeout or a deadline; None (pytest-xdist's own choice) elsewhere."""
    if config.getoption("fast"):
        return (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1) + 1
    return None


def pytest_unconfigure(config):
    patch = config.stash.get(FAST_PATCH, None)
    if patch:
        patch.undo()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """A test using a slow fixture is slow (so `-m slow` and `-m "not slow"` see it too); --fast/--slow pick a tier."""
    for item in items:
        if item.get_closest_marker("slow") is None and tiers.slow_fixtures(item):
            item.add_marker(pytest.mark.slow)
    if config.getoption("fast") or config.getoption("slow"):
        keep_slow = config.getoption("slow")
        picked = {item: (item.get_closest_marker("slow") is not None) == keep_slow for item in items}
        config.hook.pytest_deselected(items=[item for item, keep in picked.items() if not keep])
        items[:] = [item for item, keep in picked.items() if keep]


FAST_PATCH = pytest.StashKey[pytest.MonkeyPatch]()


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
@tiers.slow("the real glue builds' C++ compiles")
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


_HARNESS_SECONDS: list[float] = []


def pytest_runtest_logreport(report) -> None:
    if "test_hostile_" in report.nodeid:
        _HARNESS_SECONDS.append(report.duration)


def pytest_terminal_summary(terminalreporter) -> None:
    """The hostile-input harness's own time (tests/cli/), capped at 6 minutes of the suite. Here, not in
    tests/cli/conftest.py: pytest-xdist's controller, which prints the summary, loads only this conftest."""
    if _HARNESS_SECONDS:
        terminalreporter.write_line(
            f"hostile-input harness: {len(_HARNESS_SECONDS) // 3} tests, {sum(_HARNESS_SECONDS):.1f} s"
        )


def pytest_sessionfinish(session):
    """Disk: the test cache's two installs of one PyPI torch share their files (tests/support/shared_files.py).
    Once, in pytest-xdist's controller: two workers would hardlink the same files at once."""
    if hasattr(session.config, "workerinput"):
        return
    shared = [(name, freed) for name, freed in share_torch_venvs() if freed]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if shared and reporter:
        reporter.write_line(
            "test cache: "
            + ", ".join(f"{name} shares {freed / 2**30:.1f} GiB with the tests' venv" for name, freed in shared)
        )
