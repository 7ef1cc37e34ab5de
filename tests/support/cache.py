"""Where tests keep what they download or build once (torch venvs, wheels, tools).

Outside the work tree, so that every clone and worktree on a machine, and CI's fresh clone after a
session, reuse one copy instead of downloading gigabytes again. FAFORGE_TEST_CACHE overrides it.
"""

from __future__ import annotations

import os
from pathlib import Path

TEST_CACHE = Path(
    os.environ.get("FAFORGE_TEST_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "faforge-tests"
)


def cache_dir(name: str) -> Path:
    """TEST_CACHE/name, the folder one kind of cached artifact lives in (not created here)."""
    return TEST_CACHE / name
