"""The conda world, generated once per machine (tests/conda_world/world.py), for every test here."""

from __future__ import annotations

import time

import pytest

from tests.conda_world.world import build_world


@pytest.fixture(scope="session")
def world(request):
    """The generated world; its size and build time go to the terminal (not captured), as CI logs them."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    started = time.monotonic()
    built = build_world(log=lambda line: None)
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        reporter.write_line(f"\nconda world: {built.size_bytes / 2**30:.2f} GiB of packages at {built.root}, generated in "
                            f"{built.seconds:.0f} s ({'this run' if time.monotonic() - started > built.seconds / 2 else 'cached'})")
    return built
