"""The wheel index reader reads only what pip would and bounds every read: project URLs as pip builds them
(real pip's own SearchScope, and real pip's request on the wire, are the ground truth), root names that lead
out of the index read nothing, a body cut short is a failure for every caller of faforge.httpclient, each
linked file is hashed once, and the checks stay linear in the page size."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faforge import httpclient, untrusted
from faforge.errors import RemoteError
from faforge.packagefile import sha256_of
from faforge.pipindex import read as reader
from faforge.pipindex import validate as validate_module
from faforge.pipindex.parse import Listing, Page
from faforge.pipindex.read import project_url, read_local, read_remote
from faforge.pipindex.validate import validate
from tests.cli.hostile_wheel_indexes import LINKED_BYTES, MANY_LINKS, make_wheel_index
from tests.pipindex.test_real_clients import pip_env
from tests.support.hostile_server import serve_hostile
from tests.support.pip_index_server import requests, serve_index

NAMES = ["flash-attn", "Flash_Attn", "FLASH.attn", "a..b", "A-_.b", "x"]


def test_project_urls_are_the_ones_pips_search_scope_builds():
    from pip._internal.models.search_scope import SearchScope  # noqa: PLC0415 (the installed pip's own code: a pip without it fails this test, not the module)

    for index in (
        "https://h.example/wheels/torch2.11-cu130/",
        "https://h.example/wheels/torch2.11-cu130",
        "file:///srv/w/torch2.11-cu130/",
    ):
        scope = SearchScope.create(find_links=[], index_urls=[index], no_index=False)
        for name in NAMES:
            assert [project_url(index.rstrip("/") + "/", name)] == [
                u.rstrip("/") + "/" for u in scope.get_index_urls_locations(name)
            ]


def test_real_pip_asks_for_the_url_our_reader_reads(tmp_path):
    """pip download Flash_Attn asks for BASE/flash-attn/ (its name normalised, joined under the index), the page
    our reader reads for a root that lists Flash_Attn."""
    root = make_wheel_index("valid", tmp_path)
    index = root / "torch2.14-cu130"
    (index / "index.json").write_text(
        json.dumps({"meta": {"api-version": "1.1"}, "projects": [{"name": "Flash_Attn"}]})
    )
    with serve_index(root, tmp_path / "log.jsonl") as base:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--isolated",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-cache-dir",
                "--index-url",
                f"{base}torch2.14-cu130/",
                "--dest",
                str(tmp_path / "dest"),
                "Flash_Attn",
            ],
            capture_output=True,
            text=True,
            env=pip_env(),
            timeout=120,
        )
        pip_asked = {r["path"] for r in requests(tmp_path / "log.jsonl") if r["path"] != "/"}
        listing = read_remote(f"{base}torch2.14-cu130/")
    assert pip_asked == {"/torch2.14-cu130/flash-attn/"}, pip_asked
    assert [p.url for p in listing.projects["flash-attn"].values()] == [f"{base}torch2.14-cu130/flash-attn/"] * 2


def test_root_names_that_leave_the_index_read_nothing(tmp_path, monkeypatch):
    """Every request stays under the index URL; every local file read stays in the index folder."""
    asked, opened = [], []
    request, read_bytes = httpclient.request, untrusted.read_bytes
    monkeypatch.setattr(httpclient, "request", lambda url, **kw: asked.append(url) or request(url, **kw))
    monkeypatch.setattr(
        untrusted, "read_bytes", lambda path, *a, **kw: opened.append(path) or read_bytes(path, *a, **kw)
    )
    with serve_hostile() as server:
        index = f"{server}/escape/wheels/torch2.14-cu130/"
        listing = read_remote(index)
    assert asked and all(url.startswith(index) for url in asked), asked
    assert len([p for p in listing.problems if "which is no project name pip could ask for" in p]) == 6, (
        listing.problems
    )
    local = make_wheel_index("escape", tmp_path) / "torch2.14-cu130"
    listing = read_local(local)
    assert opened and all(Path(p).parent == local for p in opened), opened
    assert len([p for p in listing.problems if "which is no project name pip could ask for" in p]) == 7, (
        listing.problems
    )


@pytest.mark.parametrize(
    ("mode", "kind", "max_bytes"),
    [
        ("short", "index page", None),
        ("cut", "index page", None),
        ("short", "wheel range", 100_000),
        ("short", "package", None),
    ],
)
def test_a_body_cut_short_is_a_failure_for_every_caller(mode, kind, max_bytes):
    with serve_hostile() as server:
        url = f"{server}/{mode}/x"
        with pytest.raises(RemoteError, match="its body ended") as caught:
            httpclient.request(url, kind=kind, max_bytes=max_bytes)
    assert url in caught.value.message


def test_the_whole_index_has_one_deadline(monkeypatch):
    monkeypatch.setenv(httpclient.DEADLINE_ENV, "1.5")
    with serve_hostile() as server:
        started = time.monotonic()
        with pytest.raises(
            RemoteError, match=re.escape("the 1.5 s of the whole read it is part of (FAFORGE_HTTP_DEADLINE)")
        ):
            read_remote(f"{server}/many/torch2.11-cu130/")
        assert time.monotonic() - started < 3


def test_a_local_page_has_the_cap_of_a_remote_one(tmp_path):
    assert untrusted.CAPS[reader.PAGE_KIND] == httpclient.BODY_CAPS[reader.PAGE_KIND] == 64 << 20
    index = make_wheel_index("huge", tmp_path) / "torch2.14-cu130"
    with pytest.raises(Exception, match="more than the 67,108,864"):
        read_local(index)


def test_each_file_is_hashed_once_however_many_links_name_it(tmp_path, monkeypatch):
    root = make_wheel_index("many-links", tmp_path)
    hashed = []
    monkeypatch.setattr(validate_module, "sha256_of", lambda path: hashed.append(path) or sha256_of(path))
    started = time.monotonic()
    problems = validate(read_local(root / "torch2.14-cu130"), index="torch2.14-cu130", files=root / "files")
    took = time.monotonic() - started
    assert len(hashed) == 1 and sum("has another sha256 or size" in p for p in problems) == 2 * MANY_LINKS
    assert took < 10, f"{took:.1f} s for {2 * MANY_LINKS} links to one {LINKED_BYTES:,}-byte file"


def test_the_checks_are_linear_in_the_page_size():
    """A root page of 100,000 distinct names: counting repeats was quadratic (10^10 steps), now one pass."""
    names = tuple(f"p{i}" for i in range(100_000))
    listing = Listing("file:///x/", {"json": Page("file:///x/", "json", "1.1", None, projects=names)}, {})
    started = time.monotonic()
    assert validate(listing) == []
    assert time.monotonic() - started < 5
