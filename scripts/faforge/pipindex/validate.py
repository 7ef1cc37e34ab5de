"""Our conformance rules for one index, judged on what faforge.pipindex.read found (the verdict only).

PEP 503/691/700 as pip and uv read them, plus what this project promises on top:
- every page has api-version 1.x; the root lists PEP 503-normalised names, each once;
- every file is a wheel whose name is its project's, once per page, with a sha256 (64 hex digits),
  a Requires-Python that parses, and (JSON) its size; JSON's `versions` are its files' versions;
- when both formats were read, they agree on the projects and on every file's hash, Requires-Python
  and metadata hash;
- a flash-attn glue wheel lies only in the index its local label names;
- for a local root (`files`: ROOT/files), every link's file is there with that sha256 and size, and
  every metadata hash is that of W.metadata beside it.
"""

from __future__ import annotations

import re
import urllib.parse
from collections import Counter
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from faforge.errors import FaforgeError
from faforge.packagefile import sha256_of
from faforge.pipindex.layout import METADATA_SUFFIX, index_name, parse_index_name
from faforge.pipindex.parse import FileLink, Listing, Page
from faforge.pipindex.placement import GLUE
from faforge.pipwheel.filename import parse_wheel_filename
from faforge.wheelnames import GLUE_LABEL

SHA256 = re.compile(r"[0-9a-f]{64}")


def validate(listing: Listing, *, index: str | None = None, files: Path | None = None) -> list[str]:
    """Every broken rule, one line each naming the page or file; empty when the index conforms.
    `index` is its name (torch2.11-cu130), when known; `files` the local ROOT/files its links must name."""
    problems = list(listing.problems)
    digests: dict[Path, tuple[str, int] | None] = {}  # each file hashed once, however many links name it
    if not listing.roots:
        problems.append(f"{listing.url}: no root page was read")
    for page in listing.roots.values():
        problems += _api_version(page)
        problems += [
            f"{page.url} ({page.format}): {name!r} is not a PEP 503-normalised name (it is {canonicalize_name(name)!r})"
            for name in page.projects
            if canonicalize_name(name) != name
        ]
        problems += [
            f"{page.url} ({page.format}): lists {name!r} twice"
            for name, n in sorted(Counter(page.projects).items())
            if n > 1
        ]
    if len({tuple(sorted(p.projects)) for p in listing.roots.values()}) > 1:
        problems.append(f"{listing.url}: its JSON and HTML root pages list different projects")
    for project, pages in listing.projects.items():
        for page in pages.values():
            problems += _api_version(page) + _project_page(project, page, index)
        if len(pages) > 1:
            problems += _agree(pages)
        if files is not None:
            for page in pages.values():
                problems += _local_files(page, files, digests)
    return problems


def _api_version(page: Page) -> list[str]:
    version = page.api_version
    if not isinstance(version, str) or not re.fullmatch(r"1\.[0-9]+", version):
        where = "meta.api-version" if page.format == "json" else '<meta name="pypi:repository-version">'
        return [f"{page.url} ({page.format}): {where} is {version!r}, not 1.x"]
    return []


def _project_page(project: str, page: Page, index: str | None) -> list[str]:
    where = f"{page.url} ({page.format})"
    out = []
    if page.format == "json" and page.name is not None and canonicalize_name(page.name) != project:
        out.append(f"{where}: names the project {page.name!r}, but the root links it as {project!r}")
    seen, versions = set(), set()
    for link in page.files:
        what = f"{where}: {link.filename}"
        if link.filename in seen:
            out.append(f"{what}: listed twice")
        seen.add(link.filename)
        try:
            name = parse_wheel_filename(link.filename)
        except FaforgeError as exc:
            out.append(f"{what}: {exc.message.removeprefix(link.filename + ': ')}")
            continue
        versions.add(name.version)
        if name.name != project:
            out.append(f"{what}: is a wheel of {name.name!r}, not of {project!r}")
        if not SHA256.fullmatch(link.hashes.get("sha256", "")):
            out.append(f"{what}: has no sha256 (64 hex digits) in its link")
        if not link.requires_python:
            out.append(f"{what}: has no Requires-Python in its link")
        else:
            try:
                SpecifierSet(link.requires_python)
            except InvalidSpecifier:
                out.append(f"{what}: its Requires-Python {link.requires_python!r} is not a PEP 440 specifier")
        if page.format == "json" and link.size is None:
            out.append(f"{what}: has no size (PEP 700)")
        if link.core_metadata is not None and not (
            isinstance(link.core_metadata, str) and SHA256.fullmatch(link.core_metadata)
        ):
            out.append(f"{what}: offers its metadata without a sha256 of it")
        if index and name.name == GLUE:
            match = GLUE_LABEL.fullmatch(name.local or "")
            named = index_name(match["torch"], match["cuda"]) if match else None
            if parse_index_name(index) and named != index:
                out.append(f"{what}: its local label {name.local!r} names {named or 'no index'}, not {index}")
    if (
        page.format == "json"
        and page.versions is not None
        and sorted(page.versions, key=Version) != sorted(versions, key=Version)
    ):
        out.append(
            f"{where}: its versions list {list(page.versions)} is "
            f"not its files' versions {sorted(versions, key=Version)}"
        )
    return out


def _facts(link: FileLink) -> tuple:
    return link.hashes.get("sha256"), link.requires_python, link.core_metadata


def _agree(pages: dict[str, Page]) -> list[str]:
    json_files = {f.filename: _facts(f) for f in pages["json"].files}
    html_files = {f.filename: _facts(f) for f in pages["html"].files}
    if json_files == html_files:
        return []
    differ = sorted(name for name in set(json_files) | set(html_files) if json_files.get(name) != html_files.get(name))
    return [f"{pages['json'].url}: its JSON and HTML pages disagree on {differ[0]} (hash, Requires-Python, metadata)"]


def _local_files(page: Page, files: Path, digests: dict[Path, tuple[str, int] | None]) -> list[str]:
    out = []
    folder = files.resolve()
    for link in page.files:
        what = f"{page.url} ({page.format}): {link.filename}"
        path = Path(urllib.parse.unquote(urllib.parse.urlparse(link.url).path))
        if path.parent.resolve() != folder or path.name != link.filename:
            out.append(f"{what}: links {link.url}, not a file in {files}")
            continue
        found = _digest(path, digests)
        if found is None:
            out.append(f"{what}: its file {path} is missing")
            continue
        if found[0] != link.hashes.get("sha256") or (link.size is not None and found[1] != link.size):
            out.append(f"{what}: {path} has another sha256 or size than its link says")
        if isinstance(link.core_metadata, str):
            meta = _digest(path.with_name(path.name + METADATA_SUFFIX), digests)
            if meta is None or meta[0] != link.core_metadata:
                out.append(f"{what}: {path.name + METADATA_SUFFIX} is missing or has another sha256 than the link says")
    return out


def _digest(path: Path, digests: dict[Path, tuple[str, int] | None]) -> tuple[str, int] | None:
    """The sha256 and size of the regular file at `path` (None when there is none), computed once per check."""
    if path not in digests:
        digests[path] = (sha256_of(path), path.stat().st_size) if path.is_file() else None
    return digests[path]
