"""FlashAttention-4's releases on PyPI, read as untrusted input: the project's JSON API page and each new
release's wheel, through faforge.httpclient (a deadline, a body cap, a short body refused).

The page is parsed strictly (faforge.untrusted.parse_json). A release is proposed only when it has a
py3-none-any wheel that is not yanked; any other release newer than the data is skipped with the reason. A
wheel's URL must stay on the page's own host (or, for pypi.org, on PyPI's file host), and its bytes must have
the size and sha256 the page gives before its METADATA is read."""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
import zlib
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from faforge import untrusted
from faforge.errors import RemoteError
from faforge.family import FLASH_ATTN_4
from faforge.wheelfetch import FetchError, http_get, save

PYPI_JSON = "https://pypi.org/pypi"  # PyPI's JSON API: <root>/<project>/json
FILE_HOSTS = {"pypi.org": "files.pythonhosted.org"}  # where a JSON API host keeps its files, beyond itself
MAX_WHEEL = 64 << 20  # FA4's wheel is ~570 KB; a page announcing more is not FA4's
MAX_METADATA = 1 << 20
HINT = "check the URL (PyPI's JSON API, or a mirror of it passed with --channel-url) and retry"
DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


@dataclass(frozen=True)
class Upstream:
    """A release of FA4 on the page, with its py3-none-any wheel."""

    version: str
    published: str  # the day its first file was uploaded
    wheel: str
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Metadata:
    """What the wheel's METADATA says: Requires-Python, and the Requires-Dist lines without a marker (the
    extras' lines are the extras' business), spelled as upstream spells them."""

    requires_python: str
    requires: tuple[str, ...]


def page_url(root: str | None) -> str:
    return f"{(root or PYPI_JSON).rstrip('/')}/{FLASH_ATTN_4.package}/json"


def read_page(url: str) -> dict:
    """The project's JSON page: a mapping whose `releases` map versions to lists of files."""
    try:
        body = http_get(url, accept="application/json")
    except FetchError as exc:
        raise RemoteError(
            f"cannot read {FLASH_ATTN_4.package}'s releases: {exc.message}", input=url, hint=HINT
        ) from None
    data = untrusted.parse_json(body, url, remote=True, hint=HINT)
    if not isinstance(data, dict) or not isinstance(data.get("releases"), dict):
        raise RemoteError(f"{url}: not a PyPI JSON API page (no `releases` mapping)", input=url, hint=HINT)
    return data


def new_releases(url: str, page: dict, newer_than: str) -> tuple[list[Upstream], list[str]]:
    """Releases on `page` newer than `newer_than`, oldest first, and one line for each one skipped, saying why."""
    found, skipped = [], []
    floor = Version(newer_than)
    for key, files in page["releases"].items():
        try:
            version = Version(key)
        except InvalidVersion:
            skipped.append(f"{str(key)[:40]!r}: not a PEP 440 version")
            continue
        if version <= floor:
            continue
        try:
            found.append(_release(url, str(version), files))
        except _Skip as why:
            skipped.append(f"{version}: {why}")
    return sorted(found, key=lambda r: Version(r.version)), skipped


class _Skip(Exception):
    """Why a release is not proposed (no wheel, yanked, a malformed file entry)."""


def _release(url: str, version: str, files: object) -> Upstream:
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise _Skip("its files are not a list of entries")
    name = f"{FLASH_ATTN_4.package.replace('-', '_')}-{version}-py3-none-any.whl"
    wheels = [f for f in files if f.get("filename") == name]
    if not wheels:
        raise _Skip(f"no {name} among its {len(files)} files")
    wheel = wheels[0]
    if wheel.get("yanked") is not False:
        reason = wheel.get("yanked_reason")
        raise _Skip(f"yanked ({reason[:80] if isinstance(reason, str) else 'no reason given'})")
    sha = (wheel.get("digests") or {}).get("sha256") if isinstance(wheel.get("digests"), dict) else None
    size, href, uploaded = wheel.get("size"), wheel.get("url"), wheel.get("upload_time")
    if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        raise _Skip(f"{name} has no sha256 digest")
    if not (isinstance(size, int) and 0 < size <= MAX_WHEEL):
        raise _Skip(f"{name}: its size {str(size)[:40]} is not a number of bytes up to {MAX_WHEEL:,}")
    if not isinstance(href, str) or not href.isprintable():
        raise _Skip(f"{name} has no URL")
    if not (isinstance(uploaded, str) and DATE.match(uploaded)):
        raise _Skip(f"{name} has no upload_time")
    days = [
        f["upload_time"][:10] for f in files if isinstance(f.get("upload_time"), str) and DATE.match(f["upload_time"])
    ]
    return Upstream(version, min(days), name, _on_host(url, urljoin(url, href)), sha, size)


def _on_host(page: str, file_url: str) -> str:
    """`file_url` when it is on the page's host (or that host's file host); a RemoteError otherwise: a page that
    sends faforge to another server is not PyPI's, or not a faithful mirror of it."""
    page_parts, parts = urlsplit(page), urlsplit(file_url)
    allowed = {page_parts.netloc, FILE_HOSTS.get(page_parts.hostname or "", "")}
    if parts.scheme not in ("http", "https") or parts.netloc not in allowed - {""}:
        raise RemoteError(
            f"{page}: a wheel's URL {file_url[:200]!r} points to another host than the page's ({page_parts.netloc})",
            input=page,
            hint="read PyPI itself, or a mirror that serves its files from its own host",
        )
    return file_url


def fetch_wheel(release: Upstream, cache: Path) -> Path:
    """The wheel, as cache/<wheel file>, downloaded unless cached; its size and sha256 checked against the page."""
    target = cache / release.wheel
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == release.sha256:
        return target
    data = http_get(release.url, kind="package", max_bytes=release.size)
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != release.size or digest != release.sha256:
        raise RemoteError(
            f"{release.url}: {len(data):,} bytes with sha256 {digest}, but the page says {release.size:,} bytes "
            f"with sha256 {release.sha256}",
            input=release.url,
            hint="retry; if it stays so, the file or the page was altered: do not propose this release",
        )
    return save(target, data)


def metadata(wheel: Path, release: Upstream) -> Metadata:
    """The wheel's dist-info METADATA, read with a cap; a wheel that is no zip or lacks it is a RemoteError."""
    member = f"{release.wheel.split('-')[0]}-{release.version}.dist-info/METADATA"
    try:
        with zipfile.ZipFile(io.BytesIO(wheel.read_bytes())) as archive, archive.open(member) as handle:
            raw = handle.read(MAX_METADATA + 1)
    except (zipfile.BadZipFile, KeyError, OSError, EOFError, zlib.error) as exc:
        raise RemoteError(f"{release.url}: no readable {member} ({exc})", input=release.url, hint=HINT) from None
    if len(raw) > MAX_METADATA:
        raise RemoteError(f"{release.url}: {member} is over {MAX_METADATA:,} bytes", input=release.url, hint=HINT)
    headers = HeaderParser().parsestr(raw.decode("utf-8", errors="replace"))
    if not _same_version(headers.get("Version"), release.version):
        raise RemoteError(
            f"{release.url}: {member} says version {headers.get('Version')!r}, not {release.version}",
            input=release.url,
            hint=HINT,
        )
    requires = []
    for line in headers.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise RemoteError(f"{release.url}: {member}: Requires-Dist {line!r}: {exc}", input=release.url) from None
        if requirement.marker is None:
            requires.append(line.strip())
    return Metadata(headers.get("Requires-Python") or "", tuple(requires))


def _same_version(said: str | None, version: str) -> bool:
    try:
        return Version(said or "") == Version(version)
    except InvalidVersion:
        return False
