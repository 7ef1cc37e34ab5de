"""Write a file so that readers see the old content or the new, never a half-written or empty one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (atomic on POSIX)."""
    path = Path(path)
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
