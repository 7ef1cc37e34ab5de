"""Parse the pages of a wheel index (PEP 503 HTML, PEP 691 JSON) as pip's collector does, into plain data.

Nothing here reads a file or the network (faforge.pipindex.read does): a page's bytes and its URL in, a
Page out, or a PageError naming the URL. An HTML page's links resolve against its first <base href> when it
has one, as pip's HTMLLinkParser resolves them, else against the page's URL.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from html.parser import HTMLParser

from faforge import untrusted
from faforge.errors import FaforgeError


class PageError(ValueError):
    """A page that is not what PEP 503/691 says it is."""


@dataclass(frozen=True)
class FileLink:
    filename: str
    url: str  # absolute (resolved against the page's URL), without the fragment
    hashes: dict[str, str]
    requires_python: str | None
    size: int | None  # PEP 700; HTML has none
    core_metadata: (
        str | bool | None
    )  # the metadata file's sha256, True when offered without a hash, None when not offered
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
    projects: dict[str, dict[str, Page]]  # project (PEP 503-normalised, as pip asks for it) -> format -> its page
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
    """pip's HTMLLinkParser: an anchor counts from its start tag (its text, a root page's project name, runs
    to its end tag), and the first <base href> is kept."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.anchors: list[tuple[dict[str, str | None], list[str]]] = []
        self.meta: dict[str, str] = {}
        self.base: str | None = None
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")
        elif tag == "a":
            self._text = []
            self.anchors.append((dict(attrs), self._text))
        elif tag == "meta":
            attrs = dict(attrs)
            if attrs.get("name"):
                self.meta[attrs["name"]] = attrs.get("content") or ""

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a":
            self._text = None


# A `<` that opens no tag, comment or declaration is text. HTMLParser hands such text over one character at a
# time (a page of 64 MiB of `<` took minutes); written as `&lt;`, which it decodes back to `<` in text and in
# attribute values alike, it is one piece of text. Nothing an anchor says changes.
_BARE_LT = re.compile(r"<(?![A-Za-z/!?])")


def _metadata_attr(value: str | None) -> str | bool | None:
    if value is None:
        return None
    name, _, digest = value.partition("=")
    return digest if name == "sha256" and digest else value.lower() != "false"


def parse_html(body: bytes, url: str, *, project: str | None) -> Page:
    """A PEP 503 page: a root's anchors are projects, a project's are files (`#sha256=` fragments)."""
    parser = _Anchors()
    try:
        # Fed once and never closed, as pip feeds it: close() rescans an unfinished tag at the end of the page
        # from each `<` on (quadratic in CPython before 3.11.13, gh-135462), and pip drops that tag too.
        parser.feed(_BARE_LT.sub("&lt;", body.decode("utf-8")))
    except UnicodeDecodeError as exc:
        raise PageError(f"{url}: not UTF-8 HTML ({exc.reason})") from None
    version = parser.meta.get("pypi:repository-version")
    anchors = [(attrs, "".join(text).strip()) for attrs, text in parser.anchors]
    if project is None:
        return Page(url, "html", version, None, projects=tuple(text for _, text in anchors))
    files = []
    base = urllib.parse.urljoin(url, parser.base) if parser.base else url
    for attrs, text in anchors:
        href = attrs.get("href") or ""
        target, _, fragment = urllib.parse.urljoin(base, href).partition("#")
        name, _, digest = fragment.partition("=")
        files.append(
            FileLink(
                filename=urllib.parse.unquote(target.rsplit("/", 1)[-1]) or text,
                url=target,
                hashes={name: digest} if digest else {},
                requires_python=attrs.get("data-requires-python"),
                size=None,
                core_metadata=_metadata_attr(attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))),
                yanked="data-yanked" in attrs,
            )
        )
    return Page(url, "html", version, project, files=tuple(files))


def parse_json(body: bytes, url: str, *, project: str | None) -> Page:
    """A PEP 691 page (api-version 1.x), its shape checked field by field."""
    try:
        data = untrusted.parse_json(body, url, hint="check the index")
    except FaforgeError as exc:
        raise PageError(f"{url}: not a JSON page ({getattr(exc, 'message', exc)})") from None
    if not isinstance(data, dict) or not isinstance(data.get("meta"), dict):
        raise PageError(f'{url}: a PEP 691 page is an object with a "meta" object')
    version = data["meta"].get("api-version")
    if project is None:
        items = data.get("projects")
        if not isinstance(items, list) or not all(
            isinstance(p, dict) and isinstance(p.get("name"), str) for p in items
        ):
            raise PageError(f'{url}: "projects" is not a list of objects with a "name"')
        return Page(url, "json", version, None, projects=tuple(p["name"] for p in items))
    items = data.get("files")
    if not isinstance(items, list) or not all(isinstance(f, dict) for f in items):
        raise PageError(f'{url}: "files" is not a list of objects')
    files = []
    for item in items:
        filename, link, hashes = item.get("filename"), item.get("url"), item.get("hashes")
        if (
            not isinstance(filename, str)
            or not isinstance(link, str)
            or not isinstance(hashes, dict)
            or not all(isinstance(v, str) for v in hashes.values())
        ):
            raise PageError(f'{url}: a file without a string "filename" and "url" and a "hashes" object of strings')
        meta = item.get("core-metadata", item.get("dist-info-metadata"))
        size = item.get("size")
        files.append(
            FileLink(
                filename=filename,
                url=urllib.parse.urljoin(url, link).partition("#")[0],
                hashes=dict(hashes),
                requires_python=item.get("requires-python") if isinstance(item.get("requires-python"), str) else None,
                size=size if isinstance(size, int) and not isinstance(size, bool) else None,
                core_metadata=meta.get("sha256")
                if isinstance(meta, dict)
                else (bool(meta) if meta is not None else None),
                yanked=bool(item.get("yanked")),
            )
        )
    versions = data.get("versions")
    return Page(
        url,
        "json",
        version,
        data.get("name") if isinstance(data.get("name"), str) else None,
        files=tuple(files),
        versions=tuple(versions) if isinstance(versions, list) and all(isinstance(v, str) for v in versions) else None,
    )


def parse_page(body: bytes, url: str, fmt: str, project: str | None) -> Page:
    """A page of format `fmt` (json | html): a root's when `project` is None, else that project's."""
    return (parse_json if fmt == "json" else parse_html)(body, url, project=project)
