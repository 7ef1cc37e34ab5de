"""Project-wide settings that users and CI may override through the environment."""

from __future__ import annotations

import os
from pathlib import Path

# The channel users add with `-c` in install instructions, fixes and the channel page.
# FAFORGE_CHANNEL overrides it (a name such as `faforge`, or a URL such as file:///srv/channel).
PUBLIC_CHANNEL = "faforge"

# Where `faforge publish` writes by default: a local folder that works offline.
DEFAULT_CHANNEL_DIR = Path("channel")
# Where it publishes wheels (pip and uv): the root of the per-(torch minor, CUDA) indexes (faforge.pipindex).
DEFAULT_INDEX_DIR = Path("wheels")


def public_channel() -> str:
    return os.environ.get("FAFORGE_CHANNEL", PUBLIC_CHANNEL)


# The base URL of the wheel indexes pip and uv users name in install lines, fixes and the page: the index of
# one (torch minor, CUDA) is BASE/torch2.11-cu130/ (faforge.pipindex.instructions). A placeholder like
# PUBLIC_CHANNEL, for where `faforge publish --index` output is served; FAFORGE_PIP_INDEX overrides it
# (an http(s):// or file:// URL, e.g. the loopback server of the tests).
PUBLIC_PIP_INDEX = "https://faforge.github.io/wheels"


def public_pip_index() -> tuple[str, str]:
    """The wheel indexes' base URL as set, and where: $FAFORGE_PIP_INDEX (set, even to nothing), else the
    default. faforge.pipindex.instructions.index_base checks it."""
    if "FAFORGE_PIP_INDEX" in os.environ:
        return os.environ["FAFORGE_PIP_INDEX"], "$FAFORGE_PIP_INDEX"
    return PUBLIC_PIP_INDEX, "the default"


# Where `faforge verify` records gate results and `faforge publish` reads them: one folder per
# package sha256, one JSON file per gate, so results from several CI jobs merge by copying.
DEFAULT_MANIFEST_DIR = Path("verification")

# Gates a package must have passed (for its exact sha256) before `faforge publish` uploads it.
# FAFORGE_REQUIRE overrides them with a comma-separated list (`--require` overrides both).
DEFAULT_REQUIRED_GATES = ("abi", "import", "gpu")


def required_gates_setting(option: str | None) -> tuple[str, str]:
    """The required-gate list as written, and where: `--require`, else $FAFORGE_REQUIRE (set, even to
    nothing), else the default. faforge.release.manifest.parse_gates parses it, whatever the source."""
    if option is not None:
        return option, "--require"
    if "FAFORGE_REQUIRE" in os.environ:
        return os.environ["FAFORGE_REQUIRE"], "$FAFORGE_REQUIRE"
    return ",".join(DEFAULT_REQUIRED_GATES), "the default"


def cache_dir() -> Path:
    """Downloads and torch environments `faforge verify` reuses (FAFORGE_CACHE_DIR overrides)."""
    if os.environ.get("FAFORGE_CACHE_DIR"):
        return Path(os.environ["FAFORGE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "faforge"


# Every setting faforge reads from the environment is spelled FAFORGE_*.
SETTING_PREFIX = "FAFORGE_"


def setting_of(path: str | os.PathLike | None) -> str | None:
    """The FAFORGE_* variable `path` came from: the set one whose value is the path or a folder above it
    (the longest such value; `/` and `.` name no folder in particular). An OSError on a path only knows the
    path; this lets the error name the setting to change, even when the value is too long to print whole."""
    if path is None:
        return None
    text = os.path.normpath(os.fsdecode(path))
    found: tuple[int, str] | None = None
    for name, value in os.environ.items():
        if not name.startswith(SETTING_PREFIX) or not value.strip():
            continue
        for base in {os.path.normpath(value), os.path.abspath(value)}:
            if base not in ("/", ".") and (text == base or text.startswith(base.rstrip("/") + "/")):
                found = max(found or (0, ""), (len(base), name))
    return found[1] if found else None
