"""Read a wheel index as pip reads it: one index (BASE/torch2.11-cu130/), local or over http(s).

A project's page is read only where pip would ask for it: its PEP 503-normalised name joined under the
index (pip's SearchScope: posixpath.join(index, quote(canonicalize_name(name))) + "/"). A root page's name
that is no project name pip could ask for (`..`, a path, a scheme, `//host`) is a problem named in one
line, and nothing is read for it: no request goes to another host or outside the index's path, no file
outside its folder is opened.

Over HTTP each page is asked for as pip asks (PEP 691 content negotiation: the JSON first, HTML after) and
parsed as what the server says it sent; a page of a Content-Type pip skips is a problem naming it. Every
request goes through faforge.httpclient (the read timeout, each request's deadline, the whole index's one
deadline: FAFORGE_HTTP_DEADLINE for all its pages together; the 64 MiB cap of an index page; a body whole or
a failure), so a silent, dripping, truncating or endless server is exit 4 naming the URL.

A local index folder is read from its files: both index.json and index.html, so that `validate` can hold
them against each other; every page through the same cap as a remote one (faforge.untrusted, before it is
held in memory), and a link, FIFO or device anywhere in the folder is refused as the root's check refuses it.
"""

from __future__ import annotations

import os
import posixpath
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from packaging.utils import InvalidName, canonicalize_name

from faforge import httpclient, untrusted
from faforge.errors import EXIT_BAD_INPUT, EXIT_REMOTE, FaforgeError, RemoteError, shorten, why_not_a_folder
from faforge.pipindex import layout
from faforge.pipindex.layout import HTML_PAGE, HTML_TYPE, JSON_PAGE, JSON_TYPE
from faforge.pipindex.parse import FileLink, Listing, Page, PageError, parse_page

ACCEPT = f"{JSON_TYPE}, {JSON_TYPE.replace('json', 'html')};q=0.2, {HTML_TYPE};q=0.01"  # pip's own Accept header
FORMATS = ("json", "html")
PAGE_KIND = "index page"  # the cap of a page, remote (httpclient.BODY_CAPS) or local (untrusted.CAPS)
# The Content-Types pip takes a page in (pip's collector, _ensure_api_header); it skips any other page.
PAGE_TYPES = {JSON_TYPE: "json", JSON_TYPE.replace("json", "html"): "html", HTML_TYPE: "html"}


class IndexMissing(RemoteError):
    """The index's root page is HTTP 404: nothing was published to it yet."""


class PageRefused(RemoteError):
    """The server answered a page with an HTTP client error (4xx: no such page, forbidden); `status` says which."""

    def __init__(self, message: str, *, status: int, **kwargs: Any):  # kwargs: FaforgeError's
        super().__init__(message, **kwargs)
        self.status = status


def project_url(index_url: str, project: str) -> str:
    """The URL pip asks for `project`'s page under `index_url` (pip's SearchScope.get_index_urls_locations)."""
    location = posixpath.join(index_url, urllib.parse.quote(canonicalize_name(project)))
    return location if location.endswith("/") else location + "/"


def project_names(roots: dict[str, Page], where: str) -> tuple[list[str], list[str]]:
    """The projects the root pages list, PEP 503-normalised as pip asks for them, and one problem per name that
    is no project name (PEP 508) pip could ask for: for those no page is read."""
    projects, problems = set(), []
    for name in dict.fromkeys(p for page in roots.values() for p in page.projects):
        try:
            projects.add(canonicalize_name(name, validate=True))
        except InvalidName:
            problems.append(
                f"{where}: lists {shorten(name, 120)!r}, which is no project name pip could ask for (PEP 508): "
                "its page is not read"
            )
    return sorted(projects), problems


def _fetch(url: str, accept: str, until: float) -> tuple[bytes, str]:
    """The body and format of one page over HTTP within the whole index's deadline `until`; a page of a
    Content-Type pip skips (a host typing index.json as application/json) is a PageError."""
    response = httpclient.request(url, kind=PAGE_KIND, headers={"Accept": accept}, until=until)
    kind = (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if kind not in PAGE_TYPES:
        raise PageError(
            f"{url}: Content-Type {shorten(kind, 80) or '(none)'}, which is no index page: pip skips it "
            f"(it reads {', '.join(PAGE_TYPES)})"
        )
    return response.body, PAGE_TYPES[kind]


def _http_error(exc: urllib.error.HTTPError, url: str, *, root: bool) -> RemoteError:
    kind = IndexMissing if root and exc.code == 404 else RemoteError
    return kind(
        f"{url}: HTTP {exc.code} {shorten(str(exc.reason), 80)}",
        input=url,
        hint="check the index URL (BASE/torch2.11-cu130/)",
    )


def read_remote(url: str, *, formats: tuple[str, ...] = FORMATS) -> Listing:
    """One index over http(s): its root, then each project's page, in each of `formats` the server offers
    (JSON only when it answers JSON to an Accept that asks for it first: a plain static server has HTML), all
    within one deadline. A root that is HTTP 404 is IndexMissing."""
    url = url if url.endswith("/") else url + "/"
    until = httpclient.until()
    accepts = {"json": ACCEPT, "html": HTML_TYPE}
    roots: dict[str, Page] = {}
    projects: dict[str, dict[str, Page]] = {}
    problems: list[str] = []
    for fmt in formats:
        try:
            body, got = _fetch(url, accepts[fmt], until)
        except urllib.error.HTTPError as exc:
            raise _http_error(exc, url, root=True) from None
        except PageError as exc:  # a Content-Type pip skips: the other Accept gets the same answer
            problems.append(str(exc))
            break
        if got != fmt:
            continue
        try:
            roots[fmt] = parse_page(body, url, fmt, None)
        except PageError as exc:
            problems.append(str(exc))
    names, unnamed = project_names(roots, url)
    problems += unnamed
    for name in names:
        page_url = project_url(url, name)
        for fmt in roots:
            try:
                body, got = _fetch(page_url, accepts[fmt], until)
                projects.setdefault(name, {})[fmt] = parse_page(body, page_url, got, name)
            except urllib.error.HTTPError as exc:
                raise _http_error(exc, page_url, root=False) from None
            except PageError as exc:
                problems.append(str(exc))
    return Listing(url, roots, projects, tuple(problems))


def project_files(index: str, project: str) -> tuple[FileLink, ...]:
    """The files one index (BASE/torch2.11-cu130/: http(s), file:// or a folder) lists for `project`, read as pip
    reads its page: one request, JSON asked for first. PageRefused where the server answers 4xx (no such page),
    RemoteError where it gives no usable answer, PageError for a page that is no PEP 503/691 page."""
    if not index.startswith(("http://", "https://")):
        folder = (
            Path(urllib.request.url2pathname(urllib.parse.urlsplit(index).path))
            if index.startswith("file://")
            else Path(index)
        )
        listing = read_local(folder) if folder.is_dir() else None
        if listing is None or project not in listing.files():
            raise PageRefused(
                f"{folder}: no page of {project}"
                + (f" ({'; '.join(listing.problems)})" if listing and listing.problems else ""),
                status=404,
                input=index,
                hint="publish the wheel there (`faforge publish --index ROOT`)",
            )
        return listing.files()[project]
    page_url = project_url(index if index.endswith("/") else index + "/", project)
    try:
        body, fmt = _fetch(page_url, ACCEPT, httpclient.until())
    except urllib.error.HTTPError as exc:
        error = _http_error(exc, page_url, root=False)
        if 400 <= exc.code < 500:
            raise PageRefused(error.message, status=exc.code, input=page_url, hint=error.hint) from None
        raise error from None
    return parse_page(body, page_url, fmt, project).files


def read_local(folder: Path) -> Listing:
    """One index folder (ROOT/torch2.11-cu130): both files of its root page and of each project's page."""
    if not folder.is_dir():
        raise FaforgeError(
            f"wheel index {folder} {why_not_a_folder(folder)}",
            input=str(folder),
            hint="name an index folder (ROOT/torch2.11-cu130) that `faforge publish --index ROOT` wrote",
        )
    layout.check_index_links(folder.parent, folder.name)
    url = folder.resolve().as_uri() + "/"
    files = {"json": JSON_PAGE, "html": HTML_PAGE}
    roots: dict[str, Page] = {}
    projects: dict[str, dict[str, Page]] = {}
    problems: list[str] = []
    for fmt, name in files.items():
        if (folder / name).is_file():
            try:
                roots[fmt] = parse_page(read_page_file(folder / name), url, fmt, None)
            except PageError as exc:
                problems.append(str(exc))
        else:
            problems.append(f"{folder}: no {name}")
    names, unnamed = project_names(roots, url)
    problems += unnamed
    for project in names:
        sub = folder / project
        for fmt, name in files.items():
            if not (sub / name).is_file():
                problems.append(f"{sub}: no {name}, though the root page lists {project}")
                continue
            try:
                projects.setdefault(project, {})[fmt] = parse_page(
                    read_page_file(sub / name), sub.resolve().as_uri() + "/", fmt, project
                )
            except PageError as exc:
                problems.append(str(exc))
    return Listing(url, roots, projects, tuple(problems))


def read_page_file(path: Path) -> bytes:
    """A local page's bytes, within an index page's cap before any of it is held (a FIFO or device refused, exit 2)."""
    return untrusted.read_bytes(os.fspath(path), PAGE_KIND, hint="run `faforge index --pip ROOT` to rewrite the pages")


def read_index(where: str) -> Listing:
    """One index: an http(s) URL, or a local index folder."""
    if where.startswith(("http://", "https://")):
        return read_remote(where)
    return read_local(Path(where))


def index_location(where: str, index_name: str) -> str:
    """One index of an index root: ROOT/torch2.11-cu130 (a folder) or BASE/torch2.11-cu130/ (a URL)."""
    if where.startswith(("http://", "https://")):
        return where.rstrip("/") + f"/{index_name}/"
    return str(Path(where) / index_name)


def read_published(where: str, index_name: str) -> Listing | None:
    """One index of the root `where` (a folder or a base URL) as `plan --index` and `page --index` read it: None
    when it does not exist yet (no such folder; HTTP 404 for its root page). A page that cannot be read as
    pip reads it is an error, never an index with fewer files: exit 4 for a remote index, 2 for a local one."""
    location = index_location(where, index_name)
    remote = location.startswith(("http://", "https://"))
    if remote:
        try:
            listing = read_remote(location)
        except IndexMissing:
            return None
    elif not os.path.lexists(location):
        return None
    else:
        listing = read_local(Path(location))
    if listing.problems:
        raise FaforgeError(
            f"--index {where}: {location} is not a readable PEP 503/691 index: {listing.problems[0]}",
            input=where,
            hint="check what the server serves there" if remote else "re-index it: `faforge index --pip ROOT`",
            exit_code=EXIT_REMOTE if remote else EXIT_BAD_INPUT,
        )
    return listing
