"""Read a package file's info/index.json without trusting the archive.

A .conda is a zip of metadata.json, info-*.tar.zst and pkg-*.tar.zst; a .tar.bz2 one tarball.
The info tarball's members must be plain relative paths (no absolute name, no `..`), regular
files or folders (no symlink, hardlink or device), each named once, so that what faforge reads is
what an installer unpacks. index.json is capped (INDEX_JSON_CAP, decompressed), parsed as strict
JSON (no NaN/Infinity) and its fields checked for the types faforge uses; every refusal is one
FaforgeError (exit 2) naming the file and the member or field.

The strict parse is faforge.untrusted's, the one JSON reader for content faforge did not write;
the cap is here because it bounds a decompressed archive member, not a file.
"""

from __future__ import annotations

import bz2
import io
import json
import posixpath
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, cast

import zstandard

from faforge import membercaps, untrusted
from faforge.channel.sandbox import plain_name, subdir_problem
from faforge.errors import FaforgeError

if TYPE_CHECKING:
    from _typeshed import SupportsRead, WriteableBuffer

INDEX_JSON = "info/index.json"
INDEX_JSON_CAP = 1 << 20  # 1 MiB; a real one is well under 2 KB
INFO_TAR_CAP = 256 << 20  # decompressed bytes of the whole info/ part read to find and check it
PAYLOAD_CAP = 4 << 30  # decompressed bytes of the payload (a real flash-attn: ~0.5 GB, its kernel library ~0.2 GB)
REBUILD = "the file is not a sound conda package; rebuild or re-download it"
# Fields faforge reads from index.json, and the JSON type each must have (None: may be absent or null).
STRINGS = ("name", "version", "build", "subdir")
OPTIONAL_STRINGS = ("platform", "arch", "noarch")
# Compressed bytes the decompressors may have read ahead of the member being measured (zstd's read size
# below, bz2's 900 kB blocks): counted in a member's favour, so the ratio rule never refuses a real one.
READ_AHEAD = 1 << 20
ZSTD_READ_SIZE = 1 << 16


class _Capped(io.RawIOBase):
    """A stream that refuses to yield more than `cap` bytes (a decompression bomb stops there)."""

    def __init__(self, stream: IO[bytes], cap: int, what: str, part: str = "info/"):
        self.stream, self.left, self.what, self.cap, self.part = stream, cap, what, cap, part

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.stream.read(min(len(view), self.left + 1))
        self.left -= len(data)
        if self.left < 0:
            raise FaforgeError(
                f"{self.what}: its {self.part} part decompresses to more than {self.cap >> 20} MiB", hint=REBUILD
            )
        view[: len(data)] = data
        return len(data)


def read_index_json(path: Path) -> dict:
    """info/index.json of the package at `path`, checked (see the module docstring)."""
    try:
        raw = _index_json_bytes(path)
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, ValueError) as exc:
        raise FaforgeError(f"{path}: cannot read {INDEX_JSON}: {exc}", hint=REBUILD) from None
    return check_index_json(parse_index_json(raw, f"{path}: {INDEX_JSON}"), f"{path}: {INDEX_JSON}")


def _index_json_bytes(path: Path) -> bytes:
    if path.name.endswith(".conda"):
        with zipfile.ZipFile(path) as outer:
            names = outer.namelist()
            infos = [n for n in names if n.startswith("info-") and n.endswith(".tar.zst")]
            odd = [n for n in names if not plain_name(n)] or [n for i, n in enumerate(names) if n in names[:i]]
            if odd or len(infos) != 1:
                why = (
                    f"zip member {odd[0]!r} is not a plain, unique name"
                    if odd
                    else f"{len(infos)} info-*.tar.zst members, not one"
                )
                raise FaforgeError(f"{path}: {why}", hint=REBUILD)
            with outer.open(infos[0]) as member:
                counted, source = _counting(member)
                reader = zstandard.ZstdDecompressor().stream_reader(
                    source, read_size=ZSTD_READ_SIZE, read_across_frames=True
                )
                return _from_info_tar(io.BufferedReader(_Capped(reader, INFO_TAR_CAP, str(path))), path, counted)
    with open(path, "rb") as f:
        counted, source = _counting(f)
        return _from_info_tar(bz2.BZ2File(source), path, counted, only_info=True)


def _counting(stream: SupportsRead[bytes]) -> tuple[membercaps.CountingReader, IO[bytes]]:
    """`stream` counted, and the counter as the decompressors' source: zstandard and BZ2File only read() it."""
    counted = membercaps.CountingReader(stream)
    return counted, cast("IO[bytes]", counted)  # their stubs ask for a whole file object; read() is all they use


def _from_info_tar(
    stream: IO[bytes], path: Path, counted: membercaps.CountingReader, *, only_info: bool = False
) -> bytes:
    """index.json from a streamed tar, refusing hostile info/ members by the payload's rule (_member_problem),
    except where links point: rattler-build's own packages hold info/licenses/ files as absolute links
    into the build's recipe folder, and info/ is never unpacked into a prefix; faforge reads only
    index.json, which must be the file itself. A .tar.bz2 also holds the payload: check_payload judges it."""
    seen: set[str] = set()
    links: set[str] = set()
    found = None
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in capped_members(tar, counted, path, capped=(INDEX_JSON,)):
            parts = [p for p in PurePosixPath(member.name).parts if p != "."]
            if only_info and parts[:1] != ["info"] and not member.name.startswith("/") and ".." not in parts:
                continue
            problem = _member_problem(member, parts, seen, links, link_targets=False)
            if problem:
                raise FaforgeError(f"{path}: archive member {member.name!r} {problem}", hint=REBUILD)
            clean = "/".join(parts)
            seen.add(clean)
            if member.issym():
                links.add(clean)
            if clean == INDEX_JSON:
                if not member.isreg():
                    raise FaforgeError(f"{path}: {INDEX_JSON} is a link, not the file itself", hint=REBUILD)
                if member.size > INDEX_JSON_CAP:
                    raise FaforgeError(
                        f"{path}: {INDEX_JSON} is {member.size} bytes, over the cap of {INDEX_JSON_CAP}", hint=REBUILD
                    )
                data = tar.extractfile(member)
                assert data is not None  # a regular member (isreg above) always has its data
                found = data.read(INDEX_JSON_CAP + 1)
    if found is None:
        raise FaforgeError(f"{path}: has no {INDEX_JSON}", hint=REBUILD)
    return found


def parse_index_json(raw: bytes, what: str) -> dict:
    """Strict JSON (faforge.untrusted.parse_json); a non-object is not an index.json."""
    data = untrusted.parse_json(raw, what, hint=REBUILD)
    if not isinstance(data, dict):
        raise FaforgeError(f"{what}: a JSON {type(data).__name__}, not an object", hint=REBUILD)
    return data


def check_index_json(data: dict, what: str) -> dict:
    """The fields faforge uses have their types, names are plain, and the subdir is one faforge
    writes to and agrees with the package's own platform and arch."""

    def wrong(field: str, expected: str) -> FaforgeError:
        value = data.get(field)
        shown = json.dumps(value)[:80]
        return FaforgeError(f'{what}: "{field}" is {shown} ({type(value).__name__}), expected {expected}', hint=REBUILD)

    for field in STRINGS:
        if not isinstance(data.get(field), str) or not data[field]:
            raise wrong(field, "a non-empty string")
    for field in OPTIONAL_STRINGS:
        if data.get(field) is not None and not isinstance(data[field], str):
            raise wrong(field, "a string or null")
    depends = data.get("depends", [])
    if not isinstance(depends, list) or not all(isinstance(d, str) for d in depends):
        raise wrong("depends", "a list of strings")
    if "build_number" in data and (not isinstance(data["build_number"], int) or isinstance(data["build_number"], bool)):
        raise wrong("build_number", "an integer")
    for field in ("name", "version", "build"):
        if not plain_name(data[field]) or any(c.isspace() for c in data[field]):
            raise FaforgeError(f'{what}: "{field}" is {json.dumps(data[field])[:80]}, not a plain name', hint=REBUILD)
    problem = subdir_problem(data["subdir"], data.get("platform"), data.get("arch"))
    if problem:
        raise FaforgeError(
            f"{what}: {problem}",
            hint="faforge publishes linux-64 (linux, x86_64), linux-aarch64 (linux, aarch64) and noarch packages; "
            "rebuild it for one of them",
        )
    return data


def check_payload(path: Path) -> None:
    """Refuse a package whose payload would not unpack as itself inside a prefix: a member that is
    absolute, climbs out with `..`, appears twice, is a device or FIFO, lies under a symlink member, or is
    a link whose target leaves the package (an absolute target, or `..` past the top). Relative links
    inside the package are what conda packages hold (lib/libfoo.so -> libfoo.so.1) and pass. py-rattler's
    extract already refuses to write outside its destination; this names the member instead of letting a
    hostile package surface later as "no extension module inside" (the untrusted-input rules)."""
    if path.name.endswith(".conda"):
        with zipfile.ZipFile(path) as outer:
            payloads = [n for n in outer.namelist() if n.startswith("pkg-") and n.endswith(".tar.zst")]
            if len(payloads) != 1:
                raise FaforgeError(f"{path}: {len(payloads)} pkg-*.tar.zst members, not one", hint=REBUILD)
            with outer.open(payloads[0]) as member:
                counted, source = _counting(member)
                reader = zstandard.ZstdDecompressor().stream_reader(
                    source, read_size=ZSTD_READ_SIZE, read_across_frames=True
                )
                _check_members(
                    io.BufferedReader(_Capped(reader, PAYLOAD_CAP, str(path), "payload")),
                    path,
                    counted,
                    skip_info=False,
                )
        return
    with open(path, "rb") as f:
        counted, source = _counting(f)
        _check_members(
            io.BufferedReader(_Capped(bz2.BZ2File(source), PAYLOAD_CAP, str(path), "payload")),
            path,
            counted,
            skip_info=True,
        )


def capped_members(
    tar: tarfile.TarFile, counted: membercaps.CountingReader, path: Path, *, capped: tuple[str, ...] = ()
) -> Iterator[tarfile.TarInfo]:
    """The members of a streamed tar, each within faforge.membercaps' caps: its declared size judged from
    its header, before any of its data is read; a regular member of RATIO_MIN_BYTES or more then read
    through in chunks, its decompressed bytes held against the compressed bytes `counted` saw go by since
    its header, plus what the decompressor may have read ahead before it (READ_AHEAD, at most all there
    was), so a bomb stops within about RATIO_CAP MiB. The caller gets each member after that, and so
    reads only the members `capped` names, which it caps itself (index.json: 1 MiB) and which are not read here."""
    total = 0
    for member in tar:
        total += member.size
        problem = membercaps.size_problem(member.size, total)
        own = "/".join(p for p in PurePosixPath(member.name).parts if p != ".") in capped
        if member.isreg() and member.size >= membercaps.RATIO_MIN_BYTES and not problem and not own:
            start, got, data = counted.count, 0, tar.extractfile(member)
            assert data is not None  # a regular member (isreg above) always has its data
            while not problem and (chunk := data.read(1 << 20)):
                got += len(chunk)
                problem = membercaps.ratio_problem(got, counted.count - start + min(READ_AHEAD, start))
        if problem:
            raise FaforgeError(f"{path}: archive member {member.name[:200]!r} {problem}", hint=REBUILD)
        yield member


def _check_members(stream: IO[bytes], path: Path, counted: membercaps.CountingReader, *, skip_info: bool) -> None:
    seen: set[str] = set()
    links: set[str] = set()
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in capped_members(tar, counted, path):
            parts = [p for p in PurePosixPath(member.name).parts if p != "."]
            if skip_info and parts[:1] == ["info"]:
                continue
            name = "/".join(parts)
            problem = _member_problem(member, parts, seen, links)
            if problem:
                raise FaforgeError(f"{path}: payload member {member.name!r} {problem}", hint=REBUILD)
            seen.add(name)
            if member.issym():
                links.add(name)


def _member_problem(
    member: tarfile.TarInfo, parts: list[str], seen: set[str], links: set[str], *, link_targets: bool = True
) -> str | None:
    if member.name.startswith("/") or ".." in parts or not parts:
        return "is not a relative path inside the package"
    name = "/".join(parts)
    if name in seen:
        return "appears twice (which one an installer keeps is not defined)"
    if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
        return "lies under a symbolic link of the package (it would be written wherever the link points)"
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        return "is a device or FIFO, which a package never holds"
    if link_targets and (member.issym() or member.islnk()):
        base = PurePosixPath(*parts[:-1]) if member.issym() else PurePosixPath()
        target = posixpath.normpath(str(base / member.linkname)) if not member.linkname.startswith("/") else None
        if target is None or target == ".." or target.startswith("../"):
            kind = "symbolic" if member.issym() else "hard"
            return f"is a {kind} link to {member.linkname!r}, outside the package"
    return None
