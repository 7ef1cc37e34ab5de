"""Write a file so that readers see the old content or the new, never a half-written or empty one."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (atomic on POSIX)."""
    path = Path(path)
    if os.path.lexists(path) and not stat.S_ISREG(os.stat(path).st_mode):  # a rename would replace a folder's entry or a device
        raise OSError(errno.EEXIST, "exists and is not a regular file, so it is not replaced", str(path))
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}-", suffix=".tmp", delete=False) as tmp:
        try:
            tmp.write(text)
        except BaseException:
            os.unlink(tmp.name)
            raise
    try:
        os.replace(tmp.name, path)
    except BaseException:
        os.unlink(tmp.name)
        raise
