"""Read files faforge did not write (a channel's index, a plan, a manifest entry, a data file a user
names) without trusting their type, size or shape.

A path can be a FIFO (reading blocks forever), a device or a symlink to one (/dev/zero never ends),
or a sparse file of gigabytes; valid JSON can nest deeper than Python's recursion limit, spell
NaN or Infinity, carry an integer of 10^5 digits or a key twice. Each is refused here with one
FaforgeError naming the file, what was wrong and what to do: bad input (exit 2) for a local file,
exit 4 when the content came from a remote channel or server (`remote=True`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from typing import Any, NoReturn

from faforge.errors import EXIT_BAD_INPUT, EXIT_REMOTE, FaforgeError, path_error

MIB = 1 << 20
# The most bytes a file of each kind may have (docs/reference/caps.md lists them).
CAPS = {
    "repodata": 256 * MIB,  # a channel subdir's repodata.json (conda-forge's largest is ~250 MB; ours are small)
    "plan": 16 * MIB,  # `faforge plan --output` (all 1,000+ cells of the matrix: ~1 MB)
    "cache list": 4 * MIB,  # `plan --cached-objects`: CI's cache keys, one a line (each at most 512 characters)
    "gate result": 1 * MIB,  # one verification/<sha256>/<gate>.json
    "package": 2048 * MIB,  # a conda package read into memory (verify --kernel-channel's download)
    "data": 16 * MIB,  # YAML/JSON data: variants/*.yaml, kernel-abi, measurements, bench-build --data
    "index page": 64 * MIB,  # a wheel index's PEP 691 JSON or PEP 503 HTML page, local or remote (PyPI's torch: ~2 MB)
}
# Deeper nesting than any file faforge reads has (repodata: 4 levels); far below Python's recursion limit.
MAX_DEPTH = 64
# More digits than any size, timestamp or count (2**64 has 20); Python refuses int() past 4,300.
MAX_INT_DIGITS = 40


def _a(kind: str) -> str:
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _label(option: str | None, path: str | os.PathLike) -> str:
    return " ".join(filter(None, [option, os.fsdecode(path)]))


def _refuse(label: str, what: str, hint: str, remote: bool) -> FaforgeError:
    return FaforgeError(f"{label} {what}", hint=hint, input=label, exit_code=EXIT_REMOTE if remote else EXIT_BAD_INPUT)


def _open_regular(path: str | os.PathLike, kind: str, label: str, hint: str, remote: bool) -> int:
    """A descriptor of the regular file at `path` of at most CAPS[kind] bytes (as fstat says). Opened
    without blocking, so a FIFO is refused before anything waits on it; a symlink is judged by what it names."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a UNIX socket
            raise _refuse(label, "is not a regular file (a socket)", hint, remote) from None
        error = path_error(exc, None, path)
        raise _refuse(label, error.message.removeprefix(os.fsdecode(path)).strip(), hint, remote) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = (
                "is a folder, not a file"
                if stat.S_ISDIR(info.st_mode)
                else "is not a regular file (a FIFO, socket or device)"
            )
            raise _refuse(label, what, hint, remote)
        if info.st_size > CAPS[kind]:
            raise _refuse(
                label,
                f"has {info.st_size:,} bytes, more than the {CAPS[kind]:,} {_a(kind)} file may have",
                hint,
                remote,
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_file(
    path: str | os.PathLike, kind: str, option: str | None = None, *, hint: str | None = None, remote: bool = False
) -> None:
    """Refuse `path` as read_bytes would, without reading it: for files another reader (py-rattler) opens next."""
    os.close(_open_regular(path, kind, _label(option, path), hint or f"name a regular {kind} file", remote))


def read_bytes(
    path: str | os.PathLike, kind: str, option: str | None = None, *, hint: str | None = None, remote: bool = False
) -> bytes:
    """At most CAPS[kind] bytes of the regular file at `path`: at most cap+1 bytes are read even when
    fstat's size lies (/proc, a file that grows while read)."""
    cap = CAPS[kind]
    label = _label(option, path)
    hint = hint or f"name a regular {kind} file"
    fd = _open_regular(path, kind, label, hint, remote)
    try:
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(MIB, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise _refuse(label, f"cannot be read: {exc.strerror or exc}", hint, remote) from None
    finally:
        os.close(fd)
    if total > cap:
        raise _refuse(
            label, f"has more than the {cap:,} bytes {_a(kind)} file may have (it grew while read)", hint, remote
        )
    return b"".join(chunks)


def read_text(
    path: str | os.PathLike, kind: str, option: str | None = None, *, hint: str | None = None, remote: bool = False
) -> str:
    """read_bytes as UTF-8 text; random bytes are refused, not decoded into nonsense."""
    label = _label(option, path)
    data = read_bytes(path, kind, option, hint=hint, remote=remote)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise _refuse(
            label, f"is not UTF-8 text ({exc.reason} at byte {exc.start})", hint or "name a text file", remote
        ) from None


class _Refused(ValueError):
    """A JSON value parses but is not data faforge accepts (NaN, a huge integer, a repeated key)."""


def _no_constant(name: str) -> NoReturn:
    raise _Refused(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{text[:40]} does not fit in a float (it would read as infinity)")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text):,} digits (more than {MAX_INT_DIGITS})")
    return int(text)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"the key {key[:80]!r} appears twice in one object (which one counts is undefined)")
            seen.add(key)
    return result


def _depth_problem(value: object) -> str | None:
    """Why `value` nests deeper than MAX_DEPTH, walked without recursion."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        if children and depth > MAX_DEPTH:
            return f"nests deeper than {MAX_DEPTH} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def parse_json(text: str | bytes, label: str, *, hint: str, remote: bool = False) -> Any:
    """The data in `text`, strict: no NaN/Infinity, no integer past MAX_INT_DIGITS, no repeated key,
    nothing deeper than MAX_DEPTH. Errors name `label`."""
    try:
        data = json.loads(
            text,
            parse_constant=_no_constant,
            parse_float=_finite,
            parse_int=_bounded_int,
            object_pairs_hook=_unique_keys,
        )
    except RecursionError:
        raise _refuse(label, f"is not usable JSON: it nests deeper than {MAX_DEPTH} levels", hint, remote) from None
    except _Refused as exc:
        raise _refuse(label, f"is not usable JSON: {exc}", hint, remote) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, bytes that are not text
        raise _refuse(label, f"is not valid JSON ({exc})", hint, remote) from None
    problem = _depth_problem(data)
    if problem:
        raise _refuse(label, f"is not usable JSON: it {problem}", hint, remote)
    return data


def load_json(
    path: str | os.PathLike, kind: str, option: str | None = None, *, hint: str | None = None, remote: bool = False
) -> Any:
    """The JSON data in the file at `path`, read by read_bytes and parsed by parse_json."""
    hint = hint or f"name a {kind} file faforge wrote"
    return parse_json(
        read_bytes(path, kind, option, hint=hint, remote=remote), _label(option, path), hint=hint, remote=remote
    )
