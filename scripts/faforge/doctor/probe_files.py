"""How the probe reads a file it does not trust (a metadata file of the environment it inspects): bounded,
without blocking, a corrupt file a finding rather than a crash.

It runs inside the target interpreter as part of the probe: faforge.doctor.probe_source puts this file's text
in place of probe.py's import of it, so it keeps probe.py's rules: any CPython 3.8+, the standard library only,
no `from __future__` and no faforge import. It is faforge.untrusted's rules in the probe's own reader, since
faforge cannot be imported there.
"""

import json
import os
import stat

# The most bytes read of one metadata file (a conda-meta record lists every file: pytorch's is ~3 MB).
READ_CAP = 64 << 20


def read_json(path, unreadable):
    """The JSON object in `path`, or None: a missing file is normal, a corrupt one goes to `unreadable`."""
    problem: list[str] = []
    text = read_text(path, problem)
    if problem:
        unreadable.append({"path": path, "reason": problem[0]})
    if text is None:
        return None
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        unreadable.append({"path": path, "reason": "not usable JSON (nested too deeply)"})
        return None
    except ValueError as exc:
        unreadable.append({"path": path, "reason": f"not valid JSON ({str(exc)[:120]})"})
        return None
    if not isinstance(data, dict):
        unreadable.append({"path": path, "reason": f"a JSON {type(data).__name__}, not an object"})
        return None
    return data


def _no_constant(name):
    raise ValueError(f"{name} is not a number JSON allows")


def text_field(data, key, path, unreadable):
    """data[key] when it is a string (or absent); another type goes to `unreadable`."""
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    unreadable.append({"path": path, "reason": f"{key!r} is a {type(value).__name__}, not a string"})
    return None


def read_text(path, problem=None):
    """The text of the regular file at `path`, at most READ_CAP bytes, or None. Opened without blocking
    and judged by fstat, so a FIFO or a link to /dev/zero is refused, not waited on or read without end
    (the untrusted-input rules); why goes to `problem` when given. faforge is not importable here: this is
    its own reader."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            why: str | None = "not a regular file"
        elif info.st_size > READ_CAP:
            why = f"{info.st_size} bytes, over the {READ_CAP}-byte cap for a metadata file"
        else:
            chunks, size = [], 0
            while size <= READ_CAP:  # fstat can understate (a file that grows): the cap holds all the same
                chunk = os.read(fd, READ_CAP + 1 - size)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
            why = None if size <= READ_CAP else f"over the {READ_CAP}-byte cap for a metadata file"
    except OSError as exc:
        why = f"unreadable ({exc.strerror})"
    finally:
        os.close(fd)
    if why is not None:
        if problem is not None:
            problem.append(why)
        return None
    return data.decode("utf-8", errors="replace")
