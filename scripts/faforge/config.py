"""Project-wide settings that users and CI may override through the environment."""

from __future__ import annotations

import os
from pathlib import Path

# The channel users add with `-c` in install instructions, fixes and the channel page.
# FAFORGE_CHANNEL overrides it (a name such as `faforge`, or a URL such as file:///srv/channel).
PUBLIC_CHANNEL = "faforge"

# Where `faforge publish` writes by default: a local folder that works offline.
DEFAULT_CHANNEL_DIR = Path("channel")


def public_channel() -> str:
    return os.environ.get("FAFORGE_CHANNEL", PUBLIC_CHANNEL)
