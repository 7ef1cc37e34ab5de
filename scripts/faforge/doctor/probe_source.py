"""The probe as the one text the target interpreter runs on stdin: probe.py, with its import of
faforge.doctor.probe_files replaced by that module's source.

The probe is written as two modules, each of one concern and each checked by the linters and tests as any
module is; the target interpreter cannot import faforge, so it gets them joined.
"""

from __future__ import annotations

from pathlib import Path

PROBE = Path(__file__).with_name("probe.py")
PROBE_FILES = Path(__file__).with_name("probe_files.py")
INCLUDE = "from faforge.doctor.probe_files import "


def probe_source() -> str:
    """probe.py's text with its one line importing from probe_files replaced by probe_files.py's text."""
    lines = PROBE.read_text().splitlines(keepends=True)
    found = [i for i, line in enumerate(lines) if line.startswith(INCLUDE)]
    if len(found) != 1:
        raise RuntimeError(f"{PROBE} has {len(found)} lines starting {INCLUDE!r}; it must have one")
    return "".join([*lines[: found[0]], PROBE_FILES.read_text(), *lines[found[0] + 1 :]])
