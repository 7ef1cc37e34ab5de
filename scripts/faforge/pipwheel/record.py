"""A wheel's RECORD holds it exactly: the check `faforge publish --index` makes before a wheel reaches an index.

The binary distribution format (https://packaging.python.org/en/latest/specifications/binary-distribution-format/)
says every file of the wheel but RECORD itself (and its signatures) is listed in `{dist-info}/RECORD`
with its hash and size, and that installers verify them. Measured here: pip 26.3 and uv 0.13.9 refuse a
wheel without RECORD and install one whose RECORD lies (a member not listed, a wrong hash or size, a
listed file that is not there); pypa/installer 1.1.0 with `--validate-record all` refuses the first three.
So an index must never serve such a wheel: which installer reads it decides whether it installs.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile

from faforge.errors import FaforgeError
from faforge.pipwheel.facts import WheelFacts
from faforge.pipwheel.members import REBUILD, check_members, read_member

RECORD_CAP = 16 << 20  # decompressed bytes of RECORD (torch 2.14.1's, ~16,000 rows: 1.9 MB)
SIGNATURES = ("RECORD.jws", "RECORD.p7s")  # listed nowhere: they sign RECORD (PEP 427)
WEAK = ("md5", "sha1")  # the format forbids them; anything hashlib guarantees beyond is allowed


def _refuse(wheel: WheelFacts, message: str) -> FaforgeError:
    return FaforgeError(f"{wheel.path}: {message}", hint=REBUILD, input=str(wheel.path))


def _digest(archive: zipfile.ZipFile, info: zipfile.ZipInfo, algorithm: str) -> tuple[str, int]:
    digest, size = hashlib.new(algorithm), 0
    with archive.open(info) as member:
        for block in iter(lambda: member.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode(), size


def check_record(wheel: WheelFacts) -> None:
    """Refuse (exit 2, naming the file and the member) a wheel whose RECORD is missing, does not parse,
    leaves a member out, names a file the wheel does not hold, or gives a hash or size its member does not
    have. Every member is read through faforge.membercaps' caps (check_members)."""
    name = f"{wheel.dist_info}/RECORD"
    try:
        with zipfile.ZipFile(wheel.path) as archive:
            infos = {i.filename: i for i in check_members(archive, str(wheel.path)) if not i.is_dir()}
            if name not in infos:
                raise _refuse(wheel, f"has no {name}, which every installer needs (pip and uv refuse the wheel)")
            try:
                rows = list(
                    csv.reader(io.StringIO(read_member(archive, name, str(wheel.path), cap=RECORD_CAP).decode()))
                )
            except (UnicodeDecodeError, csv.Error) as exc:
                raise _refuse(wheel, f"{name} is not a CSV file of UTF-8 text ({exc})") from None
            listed: dict[str, tuple[str, str]] = {}
            for row in rows:
                if not row:
                    continue
                if len(row) != 3:
                    raise _refuse(
                        wheel, f"{name} has a row of {len(row)} fields, not path,hash,size: {','.join(row)[:120]!r}"
                    )
                path, hashed, size = row
                if path in listed:
                    raise _refuse(wheel, f"{name} lists {path[:200]!r} twice")
                listed[path] = (hashed, size)
            ghost = min(set(listed) - set(infos), default=None)
            if ghost is not None:
                raise _refuse(wheel, f"{name} lists {ghost[:200]!r}, which the wheel does not hold")
            for path, info in infos.items():
                if path == name or path in (f"{wheel.dist_info}/{s}" for s in SIGNATURES):
                    continue
                if path not in listed:
                    raise _refuse(
                        wheel,
                        f"member {path[:200]!r} is not in {name} (installers that verify RECORD refuse the wheel)",
                    )
                hashed, size = listed[path]
                algorithm, _, expected = hashed.partition("=")
                if not expected or algorithm not in hashlib.algorithms_guaranteed or algorithm in WEAK:
                    raise _refuse(
                        wheel,
                        f"{name} gives {path[:200]!r} the hash {hashed[:80]!r}, "
                        "not ALGORITHM=DIGEST with sha256 or stronger",
                    )
                actual, length = _digest(archive, info, algorithm)
                if actual != expected or size != str(length):
                    raise _refuse(
                        wheel,
                        f"member {path[:200]!r} has {algorithm}={actual} and {length:,} bytes, but {name} says "
                        f"{hashed[:80]} and {size[:20] or 'no size'}",
                    )
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as exc:
        raise _refuse(wheel, f"is not a readable zip file ({exc})") from None
    except OSError as exc:
        raise _refuse(wheel, f"cannot be read: {exc.strerror or exc}") from None
