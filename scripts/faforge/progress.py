"""Progress lines for long commands: `+ cmd` echoes, timed steps, GitHub Actions log groups.

Only CLI modules call these (library code returns data). In GitHub Actions (GITHUB_ACTIONS=true)
a step becomes a collapsible ::group:: and warnings become ::warning:: annotations.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def warn(message: str) -> None:
    say(f"::warning::{message}" if in_github_actions() else f"warning: {message}")


class Step:
    failed = False


@contextmanager
def step(title: str):
    """Print the title, run the block, print '✓ title (12.3s)'; '✗' when it raised or set `failed`."""
    started = time.monotonic()
    say(f"::group::{title}" if in_github_actions() else f"== {title}")
    state = Step()
    ok = False
    try:
        yield state
        ok = not state.failed
    finally:
        mark = "✓" if ok else "✗"
        say(f"{mark} {title} ({time.monotonic() - started:.1f}s)")
        if in_github_actions():
            say("::endgroup::")
