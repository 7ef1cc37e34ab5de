"""The torch a binary's own Python distribution says it was built for: the `Requires-Dist: torch` pin in the
METADATA of the installed distribution (or unpacked wheel) whose RECORD lists the binary. PyTorch's domain
libraries pin the exact release (torchvision 0.23.0: `torch (==2.8.0)`, torchaudio 2.8.0: `torch==2.8.0`),
which is the one fact that dates a binary when every symbol it imports exists on both sides of a layout
break (faforge.abi.layout). Standard library only, like the rest of faforge.abi."""

from __future__ import annotations

import re
from pathlib import Path

_TORCH = re.compile(r"^Requires-Dist:\s*torch\s*\(?\s*([^;)]*)\)?\s*(?:;.*)?$", re.MULTILINE | re.IGNORECASE)
_CLAUSE = re.compile(r"^(==|>=|~=)\s*(\d+(?:\.\d+){0,2})(?:\.\*)?$")
# How far up from the binary a site-packages (or unpacked wheel) folder is looked for.
DEPTH = 6
# A METADATA or RECORD larger than this is not a wheel's: not read.
MAX_BYTES = 4 << 20


def torch_pin(binary: Path) -> tuple[str | None, str | None]:
    """(first, last) torch release the owning distribution admits, from `==X` (X, X) and `>=X` (X, None);
    (None, None) when no distribution lists the binary or it pins torch otherwise."""
    for folder in list(binary.parents)[:DEPTH]:
        for info in sorted(folder.glob("*.dist-info")):
            if _lists(info / "RECORD", binary.relative_to(folder).as_posix()):
                return _pin(info / "METADATA")
    return None, None


def _read(path: Path) -> str:
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            return ""
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _lists(record: Path, relative: str) -> bool:
    return any(line.split(",", 1)[0] == relative for line in _read(record).splitlines())


def _pin(metadata: Path) -> tuple[str | None, str | None]:
    match = _TORCH.search(_read(metadata))
    if not match:
        return None, None
    first = last = None
    for clause in filter(None, (c.strip() for c in match.group(1).split(","))):
        found = _CLAUSE.match(clause)
        if found and found.group(1) == "==" and found.group(2).count(".") == 2:
            return found.group(2), found.group(2)
        if found and found.group(1) in (">=", "~="):
            first = found.group(2)
    return first, last
