"""Wheels and .conda packages that lie about themselves, made from good ones: a RECORD missing or lying, a
member that is a decompression bomb, a member whose declared size is huge. Each is written member by
member with zipfile (and patched bytes where zipfile would not lie), so it holds what no builder writes."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import struct
import subprocess
import tarfile
import zipfile
from pathlib import Path

RECORD_LIES = ("no-record", "member-not-listed", "wrong-hash", "wrong-size", "names-a-ghost")
BOMB_BYTES = 64 << 20  # zeros deflate about 1000x: 64 MiB from ~64 KB
HUGE_BYTES = 3 << 30  # declared, never written: over the 2 GiB a member may declare


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _members(wheel: Path) -> tuple[dict[str, bytes], str]:
    with zipfile.ZipFile(wheel) as archive:
        members = {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}
    record = next(n for n in members if n.endswith(".dist-info/RECORD"))
    return members, record


def _record(members: dict[str, bytes], record: str) -> bytes:
    rows = [f"{n},{_hash(b)},{len(b)}" for n, b in members.items() if n != record] + [f"{record},,"]
    return ("\n".join(rows) + "\n").encode()


def _write(members: dict[str, bytes], out: Path, *, compress: dict[str, int] | None = None) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(
                name, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=(compress or {}).get(name, 6)
            )
    return out


def record_lie(wheel: Path, folder: Path, how: str) -> Path:
    """folder/<wheel's name>: the wheel with its RECORD missing or lying in the way `how` names (RECORD_LIES)."""
    members, record = _members(wheel)
    body = next(n for n in members if not n.split("/")[0].endswith(".dist-info"))
    if how == "no-record":
        return _write({n: b for n, b in members.items() if n != record}, folder / wheel.name)
    rows = _record(members, record).decode().splitlines()
    if how == "member-not-listed":
        rows = [r for r in rows if not r.startswith(f"{body},")]
    elif how == "wrong-hash":
        rows = [f"{body},{_hash(b'other bytes')},{len(members[body])}" if r.startswith(f"{body},") else r for r in rows]
    elif how == "wrong-size":
        rows = [
            f"{body},{_hash(members[body])},{len(members[body]) + 1}" if r.startswith(f"{body},") else r for r in rows
        ]
    elif how == "names-a-ghost":
        rows.insert(0, f"{body.rsplit('/', 1)[0]}/ghost.py,{_hash(b'')},0")
    else:
        raise ValueError(how)
    return _write({**members, record: ("\n".join(rows) + "\n").encode()}, folder / wheel.name)


def with_member(wheel: Path, folder: Path, name: str, data: bytes, *, level: int = 9) -> Path:
    """folder/<wheel's name>: the wheel plus member `name` (listed in a true RECORD)."""
    members, record = _members(wheel)
    members = {name: data, **{n: b for n, b in members.items() if n != record}}
    return _write({**members, record: _record(members, record)}, folder / wheel.name, compress={name: level})


def bomb_wheel(wheel: Path, folder: Path) -> Path:
    """The wheel plus a member of BOMB_BYTES zeros, deflated about 1000x (RECORD true: only the ratio gives it away)."""
    return with_member(wheel, folder, "pkg_bomb/zeros.bin", bytes(BOMB_BYTES))


def declared_huge_wheel(wheel: Path, folder: Path) -> Path:
    """The wheel plus a 1-byte member whose central-directory entry declares HUGE_BYTES (bytes patched)."""
    path = with_member(wheel, folder, "pkg_huge/huge.bin", b"x", level=0)
    data = bytearray(path.read_bytes())
    name = b"pkg_huge/huge.bin"
    at = -1
    while data[at + 46 : at + 46 + len(name)] != name or at < 0:
        at = data.index(b"PK\x01\x02", at + 1)  # the central directory entries, until ours
    struct.pack_into("<I", data, at + 24, HUGE_BYTES)  # uncompressed size
    path.write_bytes(bytes(data))
    return path


def _zstd(raw: bytes) -> bytes:
    return subprocess.run(["zstd", "-q", "-19", "-c"], input=raw, capture_output=True, check=True).stdout


def conda_with_payload(path: Path, index: dict, payload: bytes) -> Path:
    """A .conda at `path` whose pkg-*.tar.zst decompresses to `payload` (raw tar bytes, possibly cut short)."""
    info = io.BytesIO()
    with tarfile.open(fileobj=info, mode="w", format=tarfile.PAX_FORMAT) as tar:
        body = json.dumps(index).encode()
        member = tarfile.TarInfo("info/index.json")
        member.size, member.mode = len(body), 0o644
        tar.addfile(member, io.BytesIO(body))
    stem = path.name.removesuffix(".conda")
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("metadata.json", '{"conda_pkg_format_version": 2}')
        archive.writestr(f"pkg-{stem}.tar.zst", _zstd(payload))
        archive.writestr(f"info-{stem}.tar.zst", _zstd(info.getvalue()))
    return path


def tar_member(name: str, size: int, data: bytes | None = None) -> bytes:
    """One tar member: a header declaring `size`, then `data` (zeros of `size` when None; shorter data cuts the tar)."""
    member = tarfile.TarInfo(name)
    member.size, member.mode = size, 0o644
    body = bytes(size) if data is None else data
    pad = (-len(body)) % tarfile.BLOCKSIZE if data is None else 0
    return member.tobuf(format=tarfile.PAX_FORMAT) + body + bytes(pad)
