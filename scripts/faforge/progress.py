"""Progress lines for long commands: `+ cmd` echoes, timed steps, GitHub Actions log groups.

Only CLI modules call these (library code returns data). In GitHub Actions (GITHUB_ACTIONS=true)
a step becomes a collapsible ::group:: and warnings become ::warning:: annotations.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

# A skipped step's mark, beside a passed one's ✓ and a failed one's ✗ (an en dash, not a hyphen).
SKIPPED = "\u2013"


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def warn(message: str) -> None:
    say(f"::warning::{message}" if in_github_actions() else f"warning: {message}")


class Step:
    failed = False
    skipped: str | None = None  # a reason: the step ran but checked nothing, so it must not look like a pass


@contextmanager
def step(title: str) -> Iterator[Step]:
    """Print the title, run the block, print '✓ title (12.3s)'; '✗' when it raised or set `failed`,
    an en dash (SKIPPED) with the reason when it set `skipped`."""
    started = time.monotonic()
    say(f"::group::{title}" if in_github_actions() else f"== {title}")
    state = Step()
    ok = False
    try:
        yield state
        ok = not state.failed
    finally:
        elapsed = f"{time.monotonic() - started:.1f}s"
        if ok and state.skipped:
            say(f"{SKIPPED} {title} ({elapsed}; skipped: {state.skipped})")
        else:
            say(f"{'✓' if ok else '✗'} {title} ({elapsed})")
        if in_github_actions():
            say("::endgroup::")
