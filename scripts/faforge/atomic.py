"""Write a file so that readers see the old content or the new, never a half-written or empty one."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (atomic on POSIX)."""
    path = Path(path)
    if os.path.lexists(path) and not stat.S_ISREG(
        os.stat(path).st_mode
    ):  # a rename would replace a folder's entry or a device
        raise OSError(errno.EEXIST, "exists and is not a regular file, so it is not replaced", str(path))
    tmp, fd = _new_file(path)
    try:
        with open(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _new_file(path: Path) -> tuple[Path, int]:
    """A new file beside `path`, created with mode 0666 so that the umask decides (0644 under 022) as for any
    file the user's own tools write; tempfile's are 0600, unreadable
    to anyone else (a CI step as another user, a web server)."""
    while True:
        tmp = path.parent / f".{path.name}-{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
        except FileExistsError:
            continue
