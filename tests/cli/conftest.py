"""The `places` fixture shared by the hostile-input harness's modules (one set of hostile things per session)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from tests.cli.hostile_places import hostile_site, make_places
from tests.support.http_server import serve_directory


@pytest.fixture(scope="session")
def places(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The placeholders the tables use, made once: hostile files, folders, names and a hostile server."""
    tmp = tmp_path_factory.mktemp("hostile")
    rng = random.Random(14)
    with serve_directory(hostile_site(tmp, rng)) as url:
        yield make_places(tmp, rng, url)
