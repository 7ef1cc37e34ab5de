"""Read single files out of remote wheels with HTTP range requests, and find wheels on PyPI.

A torch wheel is 0.5-0.9 GB, but checking a symbol table needs one 1 MB library
out of it.  A wheel is a zip file: its central directory sits at the end, and
every member can be read on its own from its local header.  So one member costs
three small range requests (the end record, the central directory, the member)
instead of the whole download.  The member's CRC-32 from the central directory
is checked after decompression.

Wheels are found through PyPI's Simple API in its JSON form (PEP 691), which
gives absolute file URLs and each file's sha256; the per-version JSON API is
not used (it is not served everywhere).  Only the standard library is used.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import urllib.error
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge import httpclient, untrusted
from faforge.errors import FaforgeError, RemoteError, shorten

SIMPLE_INDEX_ENV = "FAFORGE_SIMPLE_INDEX"
# PyPI's simple index: where faforge reads torch wheels unless FAFORGE_SIMPLE_INDEX names another, and the index
# a user's install line names for PyPI's torch.
PYPI_SIMPLE_INDEX = "https://pypi.org/simple"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
# The end-of-central-directory record is 22 bytes plus a comment of at most 64 KiB.
EOCD_SEARCH = 22 + 0xFFFF + 20  # + the zip64 locator just before it
EOCD_MAGIC = b"PK\x05\x06"
ZIP64_LOCATOR_MAGIC = b"PK\x06\x07"
ZIP64_EOCD_MAGIC = b"PK\x06\x06"
CENTRAL_MAGIC = b"PK\x01\x02"
LOCAL_MAGIC = b"PK\x03\x04"
STORED, DEFLATED = 0, 8


class FetchError(RemoteError):
    """A remote wheel could not be read (network, HTTP status, not a zip, member absent)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a project on the index, as the Simple API lists it."""

    filename: str
    url: str
    sha256: str | None
    size: int | None

    @property
    def version(self) -> str:
        """'torch-2.7.1-cp311-...whl' -> '2.7.1' (wheel names are normalised, PEP 427)."""
        return self.filename.split("-")[1]


@dataclass(frozen=True)
class Member:
    name: str
    method: int
    crc32: int
    compressed_size: int
    size: int
    header_offset: int


def http_get(
    url: str,
    byte_range: str | None = None,
    accept: str | None = None,
    *,
    kind: str = "index page",
    max_bytes: int | None = None,
) -> bytes:
    """The body of `url` through faforge.httpclient (its deadline and `kind`'s body cap, narrowed to
    `max_bytes`); FetchError otherwise."""
    headers = {"Accept": accept} if accept else {}
    if byte_range:
        headers["Range"] = f"bytes={byte_range}"
    try:
        response = httpclient.request(url, kind=kind, headers=headers, max_bytes=max_bytes)
    except urllib.error.HTTPError as exc:
        raise FetchError(
            f"{url}: HTTP {exc.code} {exc.reason}", input=url, hint="check the URL and the server, then retry"
        ) from None
    except RemoteError as exc:
        raise FetchError(exc.message, input=url, hint=exc.hint) from None
    if byte_range and response.status != 206:
        raise FetchError(
            f"{url}: the server ignored the range request (HTTP {response.status})",
            hint="use a server that supports HTTP range requests (PyPI's file host does)",
        )
    return response.body


def simple_index() -> str:
    """The PEP 691 index to read ($FAFORGE_SIMPLE_INDEX, else PyPI); a value that is no http(s) URL of a
    host is refused here, before anything is fetched, naming the variable (the untrusted-input rules)."""
    index = os.environ.get(SIMPLE_INDEX_ENV, PYPI_SIMPLE_INDEX)
    parts = urllib.parse.urlsplit(index) if index.isprintable() else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or " " in index:
        raise FaforgeError(
            f"${SIMPLE_INDEX_ENV} {shorten(index, 120)!r} is not the URL of a PEP 691 index",
            hint=f"set it to an index such as {PYPI_SIMPLE_INDEX}, or unset it",
        )
    return index


def list_files(project: str, index: str | None = None) -> list[RemoteFile]:
    """Every file of `project` on a PEP 691 index (default: simple_index())."""
    url = f"{(index or simple_index()).rstrip('/')}/{project}/"
    data = untrusted.parse_json(
        http_get(url, accept=SIMPLE_JSON),
        f"{url}: the PEP 691 response",
        remote=True,
        hint="the index must serve application/vnd.pypi.simple.v1+json",
    )
    if not isinstance(data, dict) or not isinstance(data.get("files", []), list):
        raise FetchError(
            f"{url}: not a PEP 691 project page (no list of files)",
            input=url,
            hint="the index must serve application/vnd.pypi.simple.v1+json",
        )
    return [
        RemoteFile(f["filename"], f["url"], f.get("hashes", {}).get("sha256"), f.get("size"))
        for f in data.get("files", [])
    ]


def pick_wheel(files: list[RemoteFile], version: str, python_tag: str, platform_pattern: str) -> RemoteFile:
    """The wheel of `version` for `python_tag` ('cp311') whose platform tag matches `platform_pattern`."""
    pattern = re.compile(rf"[^-]+-{re.escape(version)}-{python_tag}-{python_tag}-{platform_pattern}\.whl")
    found = [f for f in files if pattern.fullmatch(f.filename)]
    if not found:
        raise FetchError(
            f"no wheel for version {version}, {python_tag}, platform {platform_pattern!r} among {len(files)} files"
        )
    return found[0]


class RemoteZip:
    """A zip file on an HTTP server, read member by member."""

    def __init__(self, url: str, size: int | None = None):
        self.url = url
        self.size = size if size is not None else self._size()
        self.members = self._central_directory()

    def _size(self) -> int:
        try:
            return int(httpclient.request(self.url, kind="status", method="HEAD").headers["Content-Length"])
        except (urllib.error.HTTPError, RemoteError, TypeError, ValueError) as exc:
            raise FetchError(f"{self.url}: cannot learn the file size: {exc}", input=self.url) from None

    def _read(self, start: int, length: int) -> bytes:
        data = http_get(self.url, f"{start}-{start + length - 1}", kind="wheel range", max_bytes=length)
        if len(data) != length:
            raise FetchError(f"{self.url}: asked for {length} bytes at {start}, got {len(data)}")
        return data

    def _central_directory(self) -> dict[str, Member]:
        tail_start = max(0, self.size - EOCD_SEARCH)
        tail = self._read(tail_start, self.size - tail_start)
        at = tail.rfind(EOCD_MAGIC)
        if at < 0:
            raise FetchError(f"{self.url}: not a zip file (no end-of-central-directory record)")
        count, cd_size, cd_offset = struct.unpack_from("<10xHII", tail, at)
        locator = at - 20
        if locator >= 0 and tail[locator : locator + 4] == ZIP64_LOCATOR_MAGIC:
            (eocd64_offset,) = struct.unpack_from("<8xQ", tail, locator)
            record = self._read(eocd64_offset, 56)
            if record[:4] != ZIP64_EOCD_MAGIC:
                raise FetchError(f"{self.url}: malformed zip64 end record")
            count, cd_size, cd_offset = struct.unpack_from("<32xQQQ", record)
        directory = self._read(cd_offset, cd_size)
        members: dict[str, Member] = {}
        pos = 0
        for _ in range(count):
            if directory[pos : pos + 4] != CENTRAL_MAGIC:
                raise FetchError(f"{self.url}: malformed zip central directory at entry {len(members)}")
            (method, crc, csize, usize, name_len, extra_len, comment_len, offset) = struct.unpack_from(
                "<10xH4xIIIHHH8xI", directory, pos
            )
            name = directory[pos + 46 : pos + 46 + name_len].decode("utf-8")
            extra = directory[pos + 46 + name_len : pos + 46 + name_len + extra_len]
            usize, csize, offset = _zip64_sizes(extra, usize, csize, offset)
            members[name] = Member(name, method, crc, csize, usize, offset)
            pos += 46 + name_len + extra_len + comment_len
        return members

    def read(self, name: str) -> bytes:
        member = self.members.get(name)
        if member is None:
            raise FetchError(f"{self.url}: has no member {name}")
        if max(member.size, member.compressed_size) > httpclient.BODY_CAPS["package"]:
            raise FetchError(f"{self.url}: {name} claims {member.size:,} bytes, more than a package's cap")
        header = self._read(member.header_offset, 30)
        if header[:4] != LOCAL_MAGIC:
            raise FetchError(f"{self.url}: malformed local header for {name}")
        name_len, extra_len = struct.unpack_from("<26xHH", header)
        raw = self._read(member.header_offset + 30 + name_len + extra_len, member.compressed_size)
        if member.method not in (DEFLATED, STORED):
            raise FetchError(f"{self.url}: {name} uses zip compression method {member.method}, which is not supported")
        try:
            data = zlib.decompressobj(-15).decompress(raw, member.size + 1) if member.method == DEFLATED else raw
        except zlib.error as exc:
            raise FetchError(f"{self.url}: {name} is corrupt ({exc})") from None
        if zlib.crc32(data) != member.crc32 or len(data) != member.size:
            raise FetchError(f"{self.url}: {name} failed its CRC-32 check")
        return data


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """Replace 0xFFFFFFFF fields with their zip64 extra-field values (in the order the spec gives)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            values = list(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            if usize == 0xFFFFFFFF:
                usize = values.pop(0)
            if csize == 0xFFFFFFFF:
                csize = values.pop(0)
            if offset == 0xFFFFFFFF:
                offset = values.pop(0)
        pos += 4 + length
    return usize, csize, offset


def fetch_member(wheel: RemoteFile, member: str, cache_dir: Path) -> Path:
    """`member` of `wheel`, cached as cache_dir/<wheel filename>/<member>; read once, then from disk."""
    target = cache_dir / wheel.filename / member
    if target.is_file():
        return target
    return save(target, RemoteZip(wheel.url, wheel.size).read(member))


def save(target: Path, data: bytes) -> Path:
    """`data` as `target` (its folder made), through `target.part` beside it, so that a cut run never leaves a
    short file under the name; returns `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def download_checked(url: str, sha256: str, target: Path, mismatch: Callable[[str], RemoteError]) -> Path:
    """The file at `url` saved as `target` when its sha256 is `sha256` (hex); otherwise nothing is written and
    `mismatch(the sha256 it has)` is raised, an error saying whose sha256 it should have been. A failed download
    is a FetchError naming the URL."""
    data = http_get(url, kind="package")
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise mismatch(digest)
    return save(target, data)
