"""A wheel's zip members, read without trusting them: each a plain relative name (no absolute path, no
`..`, no backslash, none twice, no symlink), at most MAX_MEMBERS, each within faforge.membercaps'
declared-size and ratio caps, and a member's bytes decompressed only up to a cap. Each refusal is one
FaforgeError (exit 2) naming the wheel and the member."""

from __future__ import annotations

import re
import stat
import zipfile
from pathlib import PurePosixPath

from faforge import membercaps
from faforge.errors import FaforgeError

METADATA_CAP = 1 << 20  # decompressed bytes of METADATA or WHEEL (real ones: a few KB)
MAX_MEMBERS = 100_000  # zip members (torch's wheel, among the largest on PyPI, has ~16,000)
REBUILD = "the file is not a sound wheel; rebuild it, or remove it from where it was found"


def refuse(what: str, message: str, hint: str = REBUILD) -> FaforgeError:
    return FaforgeError(f"{what}: {message}", hint=hint, input=what)


def member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member would not unpack as itself inside site-packages, or None."""
    name = info.filename
    parts = PurePosixPath(name).parts
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or ".." in parts
        or re.match(r"[A-Za-z]:", name)
    ):
        return "is not a relative path inside the wheel"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "is a symbolic link (a wheel installs files, not links)"
    return None


def check_members(archive: zipfile.ZipFile, what: str) -> list[zipfile.ZipInfo]:
    """The archive's members, each a plain relative name, none twice, at most MAX_MEMBERS, each within
    faforge.membercaps' declared-size and ratio caps (read from the central directory, before any member
    is decompressed; zipfile then yields no more than the declared size)."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise refuse(what, f"has {len(infos):,} members, more than the {MAX_MEMBERS:,} a wheel may have")
    seen: set[str] = set()
    total = 0
    for info in infos:
        total += info.file_size
        problem = (
            member_problem(info)
            or membercaps.size_problem(info.file_size, total)
            or membercaps.ratio_problem(info.file_size, info.compress_size)
        )
        if problem:
            raise refuse(what, f"member {info.filename[:200]!r} {problem}")
        if info.filename in seen:
            raise refuse(
                what, f"member {info.filename[:200]!r} appears twice (which one an installer keeps is not defined)"
            )
        seen.add(info.filename)
    return infos


def read_member(archive: zipfile.ZipFile, name: str, what: str, cap: int | None = None) -> bytes:
    """The bytes of member `name`, at most `cap` (METADATA_CAP) of them decompressed (a bomb stops there,
    whatever the header says)."""
    cap = METADATA_CAP if cap is None else cap
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise refuse(what, f"has no {name}") from None
    if info.file_size > cap:
        raise refuse(what, f"{name} is {info.file_size:,} bytes, more than the {cap:,} it may have")
    with archive.open(info) as member:
        data = member.read(cap + 1)
    if len(data) > cap:
        raise refuse(what, f"{name} decompresses to more than the {cap:,} bytes it may have")
    return data
