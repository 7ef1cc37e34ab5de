"""The `places` fixture shared by the hostile-input harness's modules (one set of hostile things per session)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.hostile_class_places import class_places
from tests.cli.hostile_places import hostile_site, make_places
from tests.support.hostile_server import serve_hostile
from tests.support.http_server import serve_directory


@pytest.fixture(scope="session")
def places(tmp_path_factory) -> Iterator[dict[str, str]]:
    """The placeholders the tables use, made once: hostile files, folders, names, packages, channels,
    interpreters, a server of random bytes ({www}) and a misbehaving one ({srv})."""
    tmp = tmp_path_factory.mktemp("hostile")
    rng = random.Random(14)
    with serve_directory(hostile_site(tmp, rng)) as url, serve_hostile() as srv:
        base = make_places(tmp, rng, url)
        yield {**base, **class_places(tmp, Path(base["conda"])), "srv": srv}
