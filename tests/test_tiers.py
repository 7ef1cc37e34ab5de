"""The two test tiers (tests/support/tiers.py): --fast leaves out every test whose fixtures are slow, fails a
fast test that reaches slow work or the network, and times each test out; --slow runs exactly the rest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.tiers import FAST_TIMEOUT_S

CONFTEST = (
    "from tests.conftest import pytest_addoption, pytest_collection_modifyitems, pytest_configure, pytest_unconfigure\n"
)
TESTS = """
import socket
import time

import pytest

from tests.support.tiers import slow, slow_work


@pytest.fixture
@slow("downloads the world")
def world():
    return 1


@pytest.fixture
def uses_world(world):
    return world


def test_through_a_slow_fixture(uses_world):
    pass


@pytest.mark.slow
def test_marked_slow():
    pass


def test_fast():
    pass


def test_reaches_slow_work():
    slow_work("a torch venv (here)")


def test_reaches_pypi():
    try:
        socket.getaddrinfo("pypi.org", 443)
    except socket.gaierror:
        pytest.skip("no DNS here")


def test_runs_past_the_timeout():
    time.sleep(30)
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_sample.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--rootdir", str(tmp_path), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fast_deselects_slow_fixtures_and_marks_and_fails_what_slips_in(tmp_path):
    result = run(tmp_path, "--fast", "--timeout", "2")
    out = result.stdout
    assert "2 deselected" in out, out
    assert "PASSED test_sample.py::test_fast" in out
    assert (
        "FAILED test_sample.py::test_reaches_slow_work - Failed: fast tier: this test reached a torch venv (here)"
        in out
    )
    assert "FAILED test_sample.py::test_runs_past_the_timeout - Failed: Timeout" in out
    assert (
        "FAILED test_sample.py::test_reaches_pypi - Failed: fast tier: this test reached the network ('pypi.org')"
        in out
        or "SKIPPED" in out
    ), out


def test_fast_sets_the_documented_timeout(tmp_path):
    result = run(tmp_path, "--fast", "--collect-only", "-q", "-v")
    assert f"timeout: {FAST_TIMEOUT_S}s" in result.stdout, result.stdout


def test_slow_runs_exactly_the_rest(tmp_path):
    result = run(tmp_path, "--slow")
    assert result.returncode == 0, result.stdout
    assert "PASSED test_sample.py::test_through_a_slow_fixture" in result.stdout
    assert "PASSED test_sample.py::test_marked_slow" in result.stdout
    assert "2 passed, 4 deselected" in result.stdout


def test_the_two_tiers_are_exclusive(tmp_path):
    result = run(tmp_path, "--fast", "--slow")
    assert result.returncode == 4 and "give one" in result.stderr


@pytest.mark.parametrize("path", ["tests/doctor/test_broken_torch.py", "tests/abi/test_elf.py"])
def test_this_suites_slow_fixtures_leave_the_fast_tier(path):
    """The broken-torch doctor tests read PyPI's METADATA; the ELF tests compile with g++ (both through fixtures)."""
    fast = subprocess.run(
        [sys.executable, "-m", "pytest", "--fast", "--collect-only", "-q", "-p", "no:cacheprovider", path],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "deselected" in fast.stdout.splitlines()[-1], fast.stdout
