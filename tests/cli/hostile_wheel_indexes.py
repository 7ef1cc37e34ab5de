"""Hostile local wheel indexes for hostile_classes.yaml (`channel: wheels-KIND`, made fresh at ./ch for a case):
a root ./ch holding one index, ./ch/torch2.14-cu130 (an index `plan --platform linux-64 --index` and `page
--index` read), whose pages are hostile in one way. Every page not under attack is a valid PEP 503/691 page,
so a reader that does not refuse the hostile one reads a whole index (and, before the wheel index reader
was strict, said it published nothing).

./outside (beside ./ch) holds valid pages too: an escaping name or a link leads there, so an old reader found
a readable page where it should have refused to look.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

INDEX = "torch2.14-cu130"
GLUE = "flash-attn"
WHEEL = "flash_attn-2.8.3.post2+torch2.14.cu130.abi1-cp311-cp311-manylinux_2_28_x86_64.whl"
KINDS = ("escape", "malformed", "deep", "nan", "fifo", "link", "folder-link", "huge", "many-links")
HUGE_BYTES = 8 << 30  # sparse: more than the harness lets a child hold (6 GiB), far more than an index page's cap
MANY_LINKS = 2000  # links on one project page, each naming the same file
LINKED_BYTES = 16 << 20  # that file: hashed once per link, 2000 links in each of two formats are 64 GB of hashing


def _root_pages(projects: list[str]) -> dict[str, bytes]:
    anchors = "".join(f'<a href="{p}/">{p}</a>' for p in projects)
    return {
        "index.json": json.dumps(
            {"meta": {"api-version": "1.1"}, "projects": [{"name": p} for p in projects]}
        ).encode(),
        "index.html": '<html><head><meta name="pypi:repository-version" '
        f'content="1.1"></head><body>{anchors}</body></html>'.encode(),
    }


def _project_pages(project: str, links: int = 0) -> dict[str, bytes]:
    url = f"../../files/{WHEEL.replace('+', '%2B')}"
    files = [
        {
            "filename": WHEEL,
            "url": url,
            "hashes": {"sha256": "0" * 64},
            "requires-python": ">=3.11",
            "size": LINKED_BYTES,
        }
    ] * links
    anchors = f'<a href="{url}#sha256={"0" * 64}" data-requires-python="&gt;=3.11">{WHEEL}</a>' * links
    return {
        "index.json": json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": files}).encode(),
        "index.html": '<html><head><meta name="pypi:repository-version" '
        f'content="1.1"></head><body>{anchors}</body></html>'.encode(),
    }


def _write(folder: Path, pages: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in pages.items():
        (folder / name).write_bytes(data)
    return folder


def _empty_channel(channel: Path) -> None:
    """A conda channel with no package, for `page --channel`: the page then stands or falls by the wheel index."""
    for subdir in ("noarch", "linux-64", "linux-aarch64"):
        (channel / subdir).mkdir(parents=True)
        (channel / subdir / "repodata.json").write_text(
            json.dumps({"info": {"subdir": subdir}, "packages": {}, "packages.conda": {}})
        )


def make_wheel_index(kind: str, where: Path) -> Path:
    """where/ch, a wheel index root whose index torch2.14-cu130 is hostile in this way (KINDS; `valid` is not),
    and where/ch-channel, an empty conda channel."""
    root, outside = where / "ch", where / "outside"
    _empty_channel(where / "ch-channel")
    _write(outside, _project_pages(GLUE))
    (outside / "keep.txt").write_text("keep\n")
    (root / "files").mkdir(parents=True)
    index = root / INDEX
    if kind == "folder-link":
        _write(where / "outside-index", _root_pages([GLUE]))
        _write(where / "outside-index" / GLUE, _project_pages(GLUE))
        index.symlink_to(where / "outside-index")
        return root
    if kind == "escape":  # names that are no project name pip could ask for: each leads out of the index
        _write(root / "escaped", _project_pages(GLUE))
        names = ["../outside", "../escaped", str(outside), "//localhost/outside", "http://localhost/outside", "..", "."]
        _write(index, _root_pages(names))
        return root
    _write(index, _root_pages([GLUE]))
    project = _write(index / GLUE, _project_pages(GLUE, MANY_LINKS if kind == "many-links" else 0))
    page = project / "index.json"
    if kind == "malformed":
        page.write_bytes(b'{"meta": {"api-version": "1.1"}, "files": [')
    elif kind == "deep":
        page.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    elif kind == "nan":
        page.write_bytes(b'{"meta": {"api-version": "1.1"}, "name": "flash-attn", "files": [], "x": NaN}')
    elif kind == "fifo":
        page.unlink()
        os.mkfifo(page)
    elif kind == "link":
        page.unlink()
        page.symlink_to(outside / "index.json")
    elif kind == "huge":
        with page.open("r+b") as f:
            f.truncate(HUGE_BYTES)
    elif kind == "many-links":
        with (root / "files" / WHEEL).open("wb") as f:
            f.write(os.urandom(LINKED_BYTES))
    elif kind != "valid":
        raise ValueError(f"no such hostile wheel index: {kind}")
    return root
