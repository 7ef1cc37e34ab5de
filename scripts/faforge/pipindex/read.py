"""Read a wheel index as a client does: one index (BASE/torch2.11-cu130/), local or over http(s).

Over HTTP each page is asked for as pip asks (PEP 691 content negotiation: the JSON first, HTML after),
and parsed as what the server says it sent (Content-Type); every request goes through
faforge.httpclient (the read timeout for the connect and each read, the deadline, the 64 MiB cap of an
index page), so a silent or dripping server is exit 4 naming the URL. A local index folder is read
from its files: both index.json and index.html, so that `validate` can hold them against each other.
The pages' text is not trusted: a page that is not JSON, or not the shape PEP 691 gives it, is a
problem named with its URL, never a traceback.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from faforge import httpclient, untrusted
from faforge.errors import FaforgeError, RemoteError, why_not_a_folder
from faforge.pipindex.layout import HTML_PAGE, HTML_TYPE, JSON_PAGE, JSON_TYPE

ACCEPT = f"{JSON_TYPE}, {JSON_TYPE.replace('json', 'html')};q=0.2, {HTML_TYPE};q=0.01"  # pip's own Accept header
FORMATS = ("json", "html")


class PageError(ValueError):
    """A page that is not what PEP 503/691 says it is."""


class PageRefused(RemoteError):
    """The server answered a page with an HTTP client error (4xx: no such page, forbidden); `status` says which."""

    def __init__(self, message: str, *, status: int, **kwargs):
        super().__init__(message, **kwargs)
        self.status = status


@dataclass(frozen=True)
class FileLink:
    filename: str
    url: str  # absolute (resolved against the page's URL), without the fragment
    hashes: dict[str, str]
    requires_python: str | None
    size: int | None  # PEP 700; HTML has none
    core_metadata: str | bool | None  # the metadata file's sha256, True when offered without a hash, None when not offered
    yanked: bool = False


@dataclass(frozen=True)
class Page:
    """One page (an index's root or a project's), in one format."""

    url: str
    format: str  # json | html
    api_version: str | None
    name: str | None  # a project page's project (JSON has it; HTML: from the URL)
    projects: tuple[str, ...] = ()  # a root page's
    files: tuple[FileLink, ...] = ()  # a project page's
    versions: tuple[str, ...] | None = None  # PEP 700's list, JSON only


@dataclass(frozen=True)
class Listing:
    """What one index holds: its root page and each project's, in every format it was read in."""

    url: str
    roots: dict[str, Page]  # format -> root page
    projects: dict[str, dict[str, Page]]  # project (as the root lists it) -> format -> its page
    problems: tuple[str, ...] = ()  # pages that could not be read as PEP 503/691 pages

    def files(self, fmt: str | None = None) -> dict[str, tuple[FileLink, ...]]:
        """project -> its files, from the JSON pages when read, else the HTML."""
        out = {}
        for project, pages in self.projects.items():
            page = pages.get(fmt) if fmt else (pages.get("json") or pages.get("html"))
            if page is not None:
                out[project] = page.files
        return out


class _Anchors(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], str]] = []
        self.meta: dict[str, str] = {}
        self._open: dict | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._open, self._text = dict(attrs), []
        elif tag == "meta":
            attrs = dict(attrs)
            if attrs.get("name"):
                self.meta[attrs["name"]] = attrs.get("content") or ""

    def handle_data(self, data):
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._open is not None:
            self.anchors.append((self._open, "".join(self._text).strip()))
            self._open = None


def _metadata_attr(value: str | None) -> str | bool | None:
    if value is None:
        return None
    name, _, digest = value.partition("=")
    return digest if name == "sha256" and digest else value.lower() != "false"


def parse_html(body: bytes, url: str, *, project: str | None) -> Page:
    """A PEP 503 page: a root's anchors are projects, a project's are files (`#sha256=` fragments)."""
    parser = _Anchors()
    try:
        parser.feed(body.decode("utf-8"))
        parser.close()
    except UnicodeDecodeError as exc:
        raise PageError(f"{url}: not UTF-8 HTML ({exc.reason})") from None
    version = parser.meta.get("pypi:repository-version")
    if project is None:
        return Page(url, "html", version, None, projects=tuple(text for _, text in parser.anchors))
    files = []
    for attrs, text in parser.anchors:
        href = attrs.get("href") or ""
        target, _, fragment = urllib.parse.urljoin(url, href).partition("#")
        name, _, digest = fragment.partition("=")
        files.append(FileLink(
            filename=urllib.parse.unquote(target.rsplit("/", 1)[-1]) or text, url=target, hashes={name: digest} if digest else {},
            requires_python=attrs.get("data-requires-python"), size=None,
            core_metadata=_metadata_attr(attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))),
            yanked="data-yanked" in attrs))
    return Page(url, "html", version, project, files=tuple(files))


def parse_json(body: bytes, url: str, *, project: str | None) -> Page:
    """A PEP 691 page (api-version 1.x), its shape checked field by field."""
    try:
        data = untrusted.parse_json(body, url, hint="check the index")
    except FaforgeError as exc:
        raise PageError(f"{url}: not a JSON page ({getattr(exc, 'message', exc)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("meta"), dict):
        raise PageError(f"{url}: a PEP 691 page is an object with a \"meta\" object")
    version = data["meta"].get("api-version")
    if project is None:
        items = data.get("projects")
        if not isinstance(items, list) or not all(isinstance(p, dict) and isinstance(p.get("name"), str) for p in items):
            raise PageError(f"{url}: \"projects\" is not a list of objects with a \"name\"")
        return Page(url, "json", version, None, projects=tuple(p["name"] for p in items))
    items = data.get("files")
    if not isinstance(items, list) or not all(isinstance(f, dict) for f in items):
        raise PageError(f"{url}: \"files\" is not a list of objects")
    files = []
    for item in items:
        filename, link, hashes = item.get("filename"), item.get("url"), item.get("hashes")
        if not isinstance(filename, str) or not isinstance(link, str) or not isinstance(hashes, dict) \
                or not all(isinstance(v, str) for v in hashes.values()):
            raise PageError(f"{url}: a file without a string \"filename\" and \"url\" and a \"hashes\" object of strings")
        meta = item.get("core-metadata", item.get("dist-info-metadata"))
        size = item.get("size")
        files.append(FileLink(
            filename=filename, url=urllib.parse.urljoin(url, link).partition("#")[0], hashes=dict(hashes),
            requires_python=item.get("requires-python") if isinstance(item.get("requires-python"), str) else None,
            size=size if isinstance(size, int) and not isinstance(size, bool) else None,
            core_metadata=meta.get("sha256") if isinstance(meta, dict) else (bool(meta) if meta is not None else None),
            yanked=bool(item.get("yanked"))))
    versions = data.get("versions")
    return Page(url, "json", version, data.get("name") if isinstance(data.get("name"), str) else None, files=tuple(files),
                versions=tuple(versions) if isinstance(versions, list) and all(isinstance(v, str) for v in versions) else None)


def _parse(body: bytes, url: str, fmt: str, project: str | None) -> Page:
    return (parse_json if fmt == "json" else parse_html)(body, url, project=project)


# The Content-Types pip takes a page in (pip's collector, _ensure_api_header); it skips any other page.
PAGE_TYPES = {JSON_TYPE: "json", JSON_TYPE.replace("json", "html"): "html", HTML_TYPE: "html"}


def _fetch(url: str, accept: str) -> tuple[bytes, str]:
    """The body and format of one page over HTTP; an HTTP error is a RemoteError naming the URL, and a page
    of a Content-Type pip skips (a host typing index.json as application/json) a PageError."""
    try:
        response = httpclient.request(url, kind="index page", headers={"Accept": accept})
    except urllib.error.HTTPError as exc:
        message, hint = f"{url}: HTTP {exc.code} {exc.reason}", "check the index URL (BASE/torch2.11-cu130/)"
        if 400 <= exc.code < 500:
            raise PageRefused(message, status=exc.code, input=url, hint=hint) from None
        raise RemoteError(message, input=url, hint=hint) from None
    kind = (response.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if kind not in PAGE_TYPES:
        raise PageError(f"{url}: Content-Type {kind or '(none)'}, which is no index page: pip skips it "
                        f"(it reads {', '.join(PAGE_TYPES)})")
    return response.body, PAGE_TYPES[kind]


def read_remote(url: str, *, formats: tuple[str, ...] = FORMATS) -> Listing:
    """One index over http(s): its root, then each project's page, in each of `formats` the server offers
    (JSON only when it answers JSON to an Accept that asks for it first: a plain static server has HTML)."""
    url = url if url.endswith("/") else url + "/"
    accepts = {"json": ACCEPT, "html": HTML_TYPE}
    roots, projects, problems = {}, {}, []
    for fmt in formats:
        try:
            body, got = _fetch(url, accepts[fmt])
        except PageError as exc:  # a Content-Type pip skips: the other Accept gets the same answer
            problems.append(str(exc))
            break
        if got != fmt:
            continue
        try:
            roots[fmt] = _parse(body, url, fmt, None)
        except PageError as exc:
            problems.append(str(exc))
    names = sorted({p for page in roots.values() for p in page.projects})
    for name in names:
        page_url = urllib.parse.urljoin(url, f"{urllib.parse.quote(name)}/")
        for fmt in roots:
            try:
                body, got = _fetch(page_url, accepts[fmt])
                projects.setdefault(name, {})[fmt] = _parse(body, page_url, got, name)
            except PageError as exc:
                problems.append(str(exc))
    return Listing(url, roots, projects, tuple(problems))


def project_files(index: str, project: str) -> tuple[FileLink, ...]:
    """The files one index (BASE/torch2.11-cu130/: http(s), file:// or a folder) lists for `project`, read as pip
    reads its page: one request, JSON asked for first. PageRefused where the server answers 4xx (no such page),
    RemoteError where it gives no usable answer, PageError for a page that is no PEP 503/691 page."""
    if not index.startswith(("http://", "https://")):
        folder = Path(urllib.request.url2pathname(urllib.parse.urlsplit(index).path)) if index.startswith("file://") else Path(index)
        listing = read_local(folder) if folder.is_dir() else None
        if listing is None or project not in listing.files():
            raise PageRefused(f"{folder}: no page of {project}" + (f" ({'; '.join(listing.problems)})" if listing and listing.problems else ""),
                              status=404, input=index, hint="publish the wheel there (`faforge publish --index ROOT`)")
        return listing.files()[project]
    page_url = urllib.parse.urljoin(index if index.endswith("/") else index + "/", f"{urllib.parse.quote(project)}/")
    body, fmt = _fetch(page_url, ACCEPT)
    return _parse(body, page_url, fmt, project).files


def read_local(folder: Path) -> Listing:
    """One index folder (ROOT/torch2.11-cu130): both files of its root page and of each project's page."""
    if not folder.is_dir():
        raise FaforgeError(f"wheel index {folder} {why_not_a_folder(folder)}", input=str(folder),
                           hint="name an index folder (ROOT/torch2.11-cu130) that `faforge publish --index ROOT` wrote")
    url = folder.resolve().as_uri() + "/"
    files = {"json": JSON_PAGE, "html": HTML_PAGE}
    roots, projects, problems = {}, {}, []
    for fmt, name in files.items():
        if (folder / name).is_file():
            try:
                roots[fmt] = _parse(_read(folder / name), url, fmt, None)
            except PageError as exc:
                problems.append(str(exc))
        else:
            problems.append(f"{folder}: no {name}")
    for project in sorted({p for page in roots.values() for p in page.projects}):
        sub = folder / project
        for fmt, name in files.items():
            if not (sub / name).is_file():
                problems.append(f"{sub}: no {name}, though the root page lists {project}")
                continue
            try:
                projects.setdefault(project, {})[fmt] = _parse(_read(sub / name), sub.resolve().as_uri() + "/", fmt, project)
            except PageError as exc:
                problems.append(str(exc))
    return Listing(url, roots, projects, tuple(problems))


def _read(path: Path) -> bytes:
    return untrusted.read_bytes(os.fspath(path), "data", hint="run `faforge index --pip ROOT` to rewrite the pages")


def read_index(where: str) -> Listing:
    """One index: an http(s) URL, or a local index folder."""
    if where.startswith(("http://", "https://")):
        return read_remote(where)
    return read_local(Path(where))
