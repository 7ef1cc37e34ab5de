"""What a wheel file says about itself: its name, version, tags and METADATA, read without trusting it.

A wheel is a zip file (PEP 427) named `{name}-{version}(-{build tag})?-{python}-{abi}-{platform}.whl`, whose
`{name}-{version}.dist-info/METADATA` (core metadata, RFC 822 headers) carries Requires-Dist and
Requires-Python. The file may be one faforge did not write (an index holds what anyone put there), so:
the path must be a regular file within WHEEL_CAP (a FIFO is refused before anything waits on it), its zip
members pass faforge.pipwheel.members' checks, and only METADATA and WHEEL are decompressed, each at most
METADATA_CAP bytes. The name and version in METADATA must be the file name's, as pip requires. Each refusal is one
FaforgeError (exit 2) naming the file and what is wrong with it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from email.policy import compat32
from pathlib import Path
from typing import Literal, overload

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from faforge import paths
from faforge.errors import path_error
from faforge.pipwheel.filename import WheelName, parse_wheel_filename
from faforge.pipwheel.members import METADATA_CAP, check_members, read_member
from faforge.pipwheel.members import refuse as _refuse

WHEEL_CAP = 4 << 30  # bytes of a whole wheel file (a flash-attn glue or kernel wheel for every arch: ~0.5 GB)


@dataclass(frozen=True)
class WheelFacts:
    """One wheel: its name's parts, its METADATA's requirements, and the file's sha256 and size."""

    path: Path
    filename: str
    name: str
    version: str
    local: str | None
    build_tag: str | None
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]
    requires_python: str | None
    requires_dist: tuple[str, ...]
    sha256: str
    size: int
    dist_info: str = ""  # the .dist-info folder the wheel holds (dist_info_dir), as it spells it


def identity(wheel: WheelFacts) -> tuple[str, Version, str | None, tuple[str, ...]]:
    """What makes two wheel files one wheel to pip and to an index, whatever their file names spell: the
    normalised name and version, the build tag, and the tag triples (compressed sets expanded, lowercase,
    as packaging.tags compares them). `flash_attn-...` and `Flash_Attn-...` are one wheel."""
    tags = sorted(
        {f"{p}-{a}-{t}".lower() for p in wheel.python_tags for a in wheel.abi_tags for t in wheel.platform_tags}
    )
    return wheel.name, Version(wheel.version), wheel.build_tag, tuple(tags)


def requirement(wheel: WheelFacts, project: str) -> Requirement | None:
    """The wheel's first Requires-Dist on `project` (a normalised name), its markers not evaluated; a line that does
    not parse is passed over. None if it has none."""
    for text in wheel.requires_dist:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == project:
            return req
    return None


def _open_wheel(path: Path) -> int:
    """A descriptor of the regular file at `path`, opened without blocking (a FIFO is refused, not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _refuse(str(path), "is not a regular file (a socket)", "name a wheel file") from None
        raise path_error(exc, None, path) from None
    info = os.fstat(fd)
    problem = (
        "is a folder, not a file"
        if stat.S_ISDIR(info.st_mode)
        else "is not a regular file (a FIFO, socket or device)"
        if not stat.S_ISREG(info.st_mode)
        else f"has {info.st_size:,} bytes, more than the {WHEEL_CAP:,} a wheel may have"
        if info.st_size > WHEEL_CAP
        else None
    )
    if problem:
        os.close(fd)
        raise _refuse(str(path), problem, "name a wheel file")
    return fd


def dist_info_dir(names: list[str], name: WheelName, what: str) -> str:
    """The wheel's one top-level .dist-info folder, whose project is the file name's (as pip finds it)."""
    found = sorted({n.split("/", 1)[0] for n in names if "/" in n and n.split("/", 1)[0].endswith(".dist-info")})
    if len(found) != 1:
        raise _refuse(
            what, f"has {len(found)} .dist-info folders ({', '.join(f[:80] for f in found[:3]) or 'none'}), not one"
        )
    project = found[0].removesuffix(".dist-info").rsplit("-", 1)[0]
    if canonicalize_name(project) != name.name:
        raise _refuse(what, f"its {found[0][:120]} is not of the project {name.name!r} the file name says")
    return found[0]


def parse_metadata(data: bytes, what: str) -> dict[str, list[str]]:
    """Core metadata's headers (RFC 822, as `email` parses them): field name, lowercased -> its values."""
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise _refuse(what, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    message = HeaderParser(policy=compat32).parsestr(text)
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key.lower(), []).append(str(value).strip())
    return fields


@overload
def _one(fields: dict[str, list[str]], key: str, what: str, *, required: Literal[True] = True) -> str: ...
@overload
def _one(fields: dict[str, list[str]], key: str, what: str, *, required: Literal[False]) -> str | None: ...
def _one(fields: dict[str, list[str]], key: str, what: str, *, required: bool = True) -> str | None:
    values = fields.get(key.lower(), [])
    if len(values) > 1:
        raise _refuse(what, f"has {len(values)} {key} fields, not one")
    if required and not values:
        raise _refuse(what, f"has no {key} field")
    return values[0] if values else None


def read_wheel(path: str | os.PathLike) -> WheelFacts:
    """The facts of the wheel file at `path` (see the module docstring for what is refused)."""
    path = Path(path)
    paths.require_input_file(
        path,
        "`faforge build PIP_CELL` writes wheels to --output-dir/dist/ and `faforge wheel` to --out; pass those files",
    )
    name = parse_wheel_filename(path.name)
    fd = _open_wheel(path)
    with os.fdopen(fd, "rb") as handle:
        digest, size = hashlib.sha256(), 0
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
            if size > WHEEL_CAP:
                raise _refuse(
                    str(path),
                    f"has more than the {WHEEL_CAP:,} bytes a wheel may have (it grew while read)",
                    "name a wheel file",
                )
        handle.seek(0)
        try:
            with zipfile.ZipFile(handle) as archive:
                infos = check_members(archive, str(path))
                dist_info = dist_info_dir([i.filename for i in infos], name, str(path))
                metadata = read_member(archive, f"{dist_info}/METADATA", str(path))
                wheel = read_member(archive, f"{dist_info}/WHEEL", str(path))
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as exc:
            raise _refuse(str(path), f"is not a readable zip file ({exc})") from None
        except OSError as exc:
            raise _refuse(str(path), f"cannot be read: {exc.strerror or exc}") from None
    what = f"{path}: {dist_info}/METADATA"
    fields = parse_metadata(metadata, what)
    meta_name, meta_version = _one(fields, "Name", what), _one(fields, "Version", what)
    if canonicalize_name(meta_name) != name.name:
        raise _refuse(what, f"names the project {meta_name[:80]!r}, but the file name says {name.name!r}")
    try:
        same = Version(meta_version) == Version(name.version)
    except InvalidVersion:
        raise _refuse(what, f"has the version {meta_version[:80]!r}, not a PEP 440 version") from None
    if not same:
        raise _refuse(what, f"has the version {meta_version[:80]!r}, but the file name says {name.version!r}")
    requires_python = _one(fields, "Requires-Python", what, required=False)
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise _refuse(what, f"has Requires-Python {requires_python[:80]!r}, not a PEP 440 specifier") from None
    requires = tuple(fields.get("requires-dist", []))
    for text in requires:
        try:
            Requirement(text)
        except InvalidRequirement as exc:
            raise _refuse(
                what, f"has Requires-Dist {text[:80]!r}, not a PEP 508 requirement ({str(exc)[:120]})"
            ) from None
    wheel_fields = parse_metadata(wheel, f"{path}: {dist_info}/WHEEL")
    wheel_version = _one(wheel_fields, "Wheel-Version", f"{path}: {dist_info}/WHEEL")
    if not re.fullmatch(r"1\.[0-9]+", wheel_version):
        raise _refuse(
            f"{path}: {dist_info}/WHEEL", f"has Wheel-Version {wheel_version[:40]!r}; installers read 1.x only"
        )
    return WheelFacts(
        path=path,
        filename=name.filename,
        name=name.name,
        version=name.version,
        local=name.local,
        build_tag=name.build_tag,
        python_tags=name.python_tags,
        abi_tags=name.abi_tags,
        platform_tags=name.platform_tags,
        requires_python=requires_python,
        requires_dist=requires,
        sha256=digest.hexdigest(),
        size=size,
        dist_info=dist_info,
    )


def wheel_contents(path: str | os.PathLike, cap: int | None = None) -> dict[str, bytes]:
    """Every file member of the wheel at `path` (its members checked as read_wheel checks them), at most
    `cap` (WHEEL_CAP) bytes decompressed in all: for repacking a wheel we built, or one a build made."""
    path = Path(path)
    cap = WHEEL_CAP if cap is None else cap
    fd = _open_wheel(path)
    contents: dict[str, bytes] = {}
    left = cap
    with os.fdopen(fd, "rb") as handle:
        try:
            with zipfile.ZipFile(handle) as archive:
                for info in check_members(archive, str(path)):
                    if info.is_dir():
                        continue
                    contents[info.filename] = data = read_member(archive, info.filename, str(path), cap=left)
                    left -= len(data)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as exc:
            raise _refuse(str(path), f"is not a readable zip file ({exc})") from None
        except OSError as exc:
            raise _refuse(str(path), f"cannot be read: {exc.strerror or exc}") from None
    return contents


def requires_dist_of(path: str | os.PathLike, option: str | None = None) -> tuple[str, ...]:
    """The Requires-Dist of a wheel (read_wheel) or of a core-metadata file (a wheel's METADATA, as
    `faforge.wheelfetch.fetch_member` saves it), read within METADATA_CAP."""
    path = Path(path)
    label = " ".join(filter(None, [option, str(path)]))
    if path.name.endswith(".whl"):
        return read_wheel(path).requires_dist
    fd = _open_wheel(path)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(METADATA_CAP + 1)
    if len(data) > METADATA_CAP:
        raise _refuse(
            label,
            f"has more than the {METADATA_CAP:,} bytes a METADATA file may have",
            "pass a wheel's METADATA or the wheel",
        )
    fields = parse_metadata(data, label)
    if not fields.get("name") or not fields.get("version"):
        raise _refuse(
            label, "is not core metadata (no Name and Version fields)", "pass a wheel's METADATA or the wheel"
        )
    return tuple(fields.get("requires-dist", []))
