"""A wheel's file name taken apart (PEP 427): `{name}-{version}(-{build tag})?-{python}-{abi}-{platform}.whl`.

The name alone places a wheel in an index and pairs it with its cell, before anything reads the file, so it is
parsed here on its own; faforge.pipwheel.facts reads the file and checks that its METADATA agrees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from faforge.pipwheel.members import refuse as _refuse

# PEP 427's file name: the name and version are escaped (runs of -_. become _), a build tag starts with a digit.
FILENAME = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[^-]+)"
    r"(?:-(?P<build>[0-9][A-Za-z0-9_.]*))?-(?P<python>[A-Za-z0-9_.]+)-(?P<abi>[A-Za-z0-9_.]+)"
    r"-(?P<platform>[A-Za-z0-9_.]+)\.whl"
)


@dataclass(frozen=True)
class WheelName:
    """The parts of a wheel's file name (PEP 427, compressed tag sets split on `.`)."""

    filename: str
    name: str  # PEP 503 normalised (flash-attn), whatever the file spells (flash_attn)
    version: str  # PEP 440 normalised (2.8.3.post2+torch2.11.cu130.abi1)
    local: str | None  # the local label (torch2.11.cu130.abi1), or None
    build_tag: str | None  # 0h1a2b3c4, or None
    python_tags: tuple[str, ...]
    abi_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]

    @property
    def dist_info(self) -> str:
        """The .dist-info folder the wheel must hold, as it spells the name and version (PEP 427)."""
        escaped = self.filename.split("-")
        return f"{escaped[0]}-{escaped[1]}.dist-info"

    @property
    def tags(self) -> tuple[str, ...]:
        """Every `python-abi-platform` triple the compressed tag sets expand to, sorted."""
        return tuple(
            sorted(f"{p}-{a}-{t}" for p in self.python_tags for a in self.abi_tags for t in self.platform_tags)
        )


def parse_wheel_filename(filename: str) -> WheelName:
    """The parts of a wheel file name; a name that is not PEP 427's is refused, naming it."""
    hint = "a wheel's file name is NAME-VERSION(-BUILD)?-PYTHON-ABI-PLATFORM.whl (PEP 427)"
    match = FILENAME.fullmatch(filename)
    if not match:
        raise _refuse(filename, "is not a wheel file name", hint)
    try:
        version = Version(match["version"])
    except InvalidVersion:
        raise _refuse(filename, f"has the version {match['version']!r}, not a PEP 440 version", hint) from None
    tags = {part: tuple(match[part].split(".")) for part in ("python", "abi", "platform")}
    if any(not t for ts in tags.values() for t in ts):
        raise _refuse(filename, "has an empty tag in a compressed tag set", hint)
    return WheelName(
        filename=filename,
        name=canonicalize_name(match["name"]),
        version=str(version),
        local=version.local,
        build_tag=match["build"],
        python_tags=tags["python"],
        abi_tags=tags["abi"],
        platform_tags=tags["platform"],
    )
