"""The two test tiers: `scripts/dev test --fast` runs what needs no download, no compile, no world, no PyPI.

Slowness is marked where it comes from, as cibuildwheel makes its Docker tests opt-in
(pypa/cibuildwheel unit_test/conftest.py, `--run-docker`):

* a fixture that downloads, compiles, makes a venv or a world is decorated `@slow("why")` (below
  `@pytest.fixture`); every test whose fixture closure holds one is slow (tests/conftest.py marks it);
* a helper that does such work calls `slow_work("what")` first: in the fast tier it fails the test that
  reached it, naming the helper, so a new caller cannot slip into the fast tier unnoticed;
* a test module that does the work inline carries `pytestmark = pytest.mark.slow`;
* in the fast tier a test whose lookup of a host name finds a real remote address (PyPI, Debian) fails the
  same way (names that do not resolve, `*.example`, stay the offline failures the tests mean);
  and FAST_TIMEOUT_S (pytest-timeout) fails whatever still runs long, naming the test.

`scripts/dev test --fast` runs the tier under pytest-xdist (-n auto: a worker per core, plus one): every worker
is a pytest session of its own, whose pytest_configure (tests/conftest.py) enters these guards.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable)

# Seconds one fast-tier test may take, setup and teardown included: the slowest took 7.6 s on a 2-core
# machine at load 2 and 15 s at load 10, so 60 s is a slipped download or build, not a busy machine.
FAST_TIMEOUT_S = 60
_fast = False


def slow(why: str) -> Callable[[F], F]:
    """Mark a fixture function as slow (`why`: what it downloads, builds or creates)."""

    def mark(function: F) -> F:
        function.faforge_slow = why  # type: ignore[attr-defined]
        return function

    return mark


def slow_fixtures(item: pytest.Item) -> list[str]:
    """The slow fixtures in a test's closure, as `name (why)`."""
    info = getattr(item, "_fixtureinfo", None)
    found = []
    for name, defs in info.name2fixturedefs.items() if info else ():
        why = next((getattr(d.func, "faforge_slow", None) for d in defs if getattr(d.func, "faforge_slow", None)), None)
        if why:
            found.append(f"{name} ({why})")
    return found


def slow_work(what: str) -> None:
    """Called first by a helper that downloads, compiles or creates a venv: fails its caller in the fast tier."""
    if _fast:
        pytest.fail(
            f"fast tier: this test reached {what}; decorate the fixture doing it `@slow(...)` or mark "
            "the test `pytest.mark.slow` (tests/support/tiers.py)",
            pytrace=False,
        )


def enter_fast_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast tier's guards for one session: slow_work fails, and so does a lookup that finds a remote host."""
    global _fast
    _fast = True
    real = socket.getaddrinfo

    def local_only(host, *args, **kwargs):
        found = real(host, *args, **kwargs)
        if any(not ipaddress.ip_address(address[4][0].split("%")[0]).is_loopback for address in found):
            slow_work(f"the network ({host!r})")
        return found

    monkeypatch.setattr(socket, "getaddrinfo", local_only)
