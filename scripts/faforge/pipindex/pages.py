"""The pages of one index, rendered from its wheels: PEP 503 HTML and PEP 691 JSON (api-version 1.1,
PEP 700), with PEP 658/714 core metadata. Pure and deterministic: the same wheels give the same bytes.

Every link carries the wheel's sha256 (`#sha256=`, `hashes.sha256`), its Requires-Python
(`data-requires-python`, HTML-escaped; `requires-python`) and, when its METADATA is served beside it
as W.metadata, that file's sha256 under both the PEP 714 name and the older one pip < 23.3 reads.
Links are relative (../../files/W, percent-quoted: `+` of a local version is %2B, as PyTorch's index
writes it), so the root can be served from any URL; a page's JSON and HTML sit in one folder, so a
relative link resolves the same from PROJECT/ (the canonical URL) and PROJECT/index.json.
"""

from __future__ import annotations

import html
import json
import urllib.parse
from dataclasses import dataclass

from packaging.version import Version

from faforge.pipindex.layout import API_VERSION, FILES, HTML_PAGE, JSON_PAGE, METADATA_SUFFIX


@dataclass(frozen=True)
class Link:
    """One file of a project page, as the pages say it."""

    filename: str
    sha256: str
    size: int
    version: str
    requires_python: str | None
    metadata_sha256: str | None  # of FILES/W.metadata, when it is served


def file_url(filename: str, *, extra: str = "") -> str:
    """The link from a project page (ROOT/INDEX/PROJECT/) to ROOT/files/filename."""
    return f"../../{FILES}/{urllib.parse.quote(filename + extra, safe='')}"


def project_html(project: str, links: list[Link]) -> bytes:
    rows = []
    for link in sorted(links, key=lambda k: k.filename):
        attrs = [f'href="{html.escape(file_url(link.filename))}#sha256={link.sha256}"']
        if link.requires_python:
            attrs.append(f'data-requires-python="{html.escape(link.requires_python, quote=True)}"')
        if link.metadata_sha256:
            attrs += [
                f'data-core-metadata="sha256={link.metadata_sha256}"',
                f'data-dist-info-metadata="sha256={link.metadata_sha256}"',
            ]
        rows.append(f"    <a {' '.join(attrs)}>{html.escape(link.filename)}</a><br>")
    return _html(f"Links for {project}", rows)


def root_html(index: str, projects: list[str]) -> bytes:
    rows = [f'    <a href="{html.escape(urllib.parse.quote(p))}/">{html.escape(p)}</a><br>' for p in sorted(projects)]
    return _html(f"Simple index {index}", rows)


def _html(title: str, rows: list[str]) -> bytes:
    head = [
        "<!DOCTYPE html>",
        "<html>",
        "  <head>",
        f'    <meta name="pypi:repository-version" content="{API_VERSION}">',
        f"    <title>{html.escape(title)}</title>",
        "  </head>",
        "  <body>",
        f"    <h1>{html.escape(title)}</h1>",
    ]
    return ("\n".join([*head, *rows, "  </body>", "</html>"]) + "\n").encode()


def project_json(project: str, links: list[Link]) -> bytes:
    files = []
    for link in sorted(links, key=lambda k: k.filename):
        entry = {
            "filename": link.filename,
            "url": file_url(link.filename),
            "hashes": {"sha256": link.sha256},
            "size": link.size,
        }
        if link.requires_python:
            entry["requires-python"] = link.requires_python
        if link.metadata_sha256:
            entry["core-metadata"] = entry["dist-info-metadata"] = {"sha256": link.metadata_sha256}
        files.append(entry)
    versions = sorted({link.version for link in links}, key=Version)
    return _json({"meta": {"api-version": API_VERSION}, "name": project, "versions": versions, "files": files})


def root_json(projects: list[str]) -> bytes:
    return _json({"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in sorted(projects)]})


def _json(data: dict) -> bytes:
    return (json.dumps(data, indent=2) + "\n").encode()


def index_pages(index: str, projects: dict[str, list[Link]]) -> dict[str, bytes]:
    """INDEX/... relative path -> bytes, for one index: each project's two pages, then the root's two."""
    pages = {}
    for project, links in projects.items():
        pages[f"{index}/{project}/{HTML_PAGE}"] = project_html(project, links)
        pages[f"{index}/{project}/{JSON_PAGE}"] = project_json(project, links)
    pages[f"{index}/{HTML_PAGE}"] = root_html(index, list(projects))
    pages[f"{index}/{JSON_PAGE}"] = root_json(list(projects))
    return pages


def metadata_name(filename: str) -> str:
    return filename + METADATA_SUFFIX
