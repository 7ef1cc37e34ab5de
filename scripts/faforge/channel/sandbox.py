"""A local channel is a sandbox: faforge writes only real folders and files below its root.

Every path written under a channel is built from validated parts: a platform folder from the
closed set SUBDIRS, and a plain file name. No symbolic link is followed below the root: a
platform folder, a file in one, its shards/ folder, the lock file or a staging folder that is a
link is refused (exit 2) before anything is written, and the writes themselves open with
O_NOFOLLOW and check the real path against the root. The root itself may be a link (it is
resolved once: the folder the user named). The guards themselves are faforge.sandbox's, which the pip
wheel index shares.
"""

from __future__ import annotations

import os
from pathlib import Path

from faforge.abi.platforms import PLATFORM_MACHINE, PLATFORMS
from faforge.sandbox import Sandbox, open_new, plain_name  # noqa: F401 (the channel's names for them)

# The platform folders faforge publishes and indexes; a package says which in its info/index.json.
SUBDIRS = (*PLATFORMS, "noarch")
# conda's (platform, arch) of each, as index.json spells them; noarch packages name neither.
PLATFORM_ARCH: dict[str, tuple[str | None, str | None]] = {
    **{platform: ("linux", machine) for platform, machine in PLATFORM_MACHINE.items()},
    "noarch": (None, None),
}
LINK_HINT = (
    "faforge follows no link inside a channel; replace the link with the real folder or file "
    "(or point --to at the real channel folder)"
)


def subdir_problem(subdir: str, platform: str | None, arch: str | None) -> str | None:
    """Why an index.json's subdir is not one faforge may write to (outside the closed set, or
    disagreeing with the package's own platform and arch), or None."""
    if subdir not in SUBDIRS:
        return f'"subdir" is {subdir!r}, not one of {", ".join(SUBDIRS)}'
    if (platform, arch) != PLATFORM_ARCH[subdir]:
        want = (
            "no platform and no arch"
            if subdir == "noarch"
            else "platform {!r}, arch {!r}".format(*PLATFORM_ARCH[subdir])
        )
        return f'"subdir" {subdir!r} needs {want}, but "platform" is {platform!r} and "arch" is {arch!r}'
    return None


def channel_sandbox(channel: Path) -> Sandbox:
    return Sandbox(channel, "channel", LINK_HINT)


def refuse_link(channel: Path, path: Path, *, regular: bool = False) -> None:
    """Exit 2 when `path` (below `channel`) is a symbolic link, or, with `regular`, exists and is not
    a regular file (a FIFO or device would block or never end)."""
    channel_sandbox(channel).refuse_link(path, regular=regular)


def check_channel(channel: Path, hidden_prefixes: tuple[str, ...], file_suffixes: tuple[str, ...]) -> None:
    """Refuse every link where faforge reads or writes: the platform folders and what is in them,
    and the root's entries whose names start with one of `hidden_prefixes` (lock, staging)."""
    if not channel.is_dir():
        return
    for name in sorted(os.listdir(channel)):
        if name in SUBDIRS or name.startswith(hidden_prefixes):
            refuse_link(channel, channel / name)
    for subdir in SUBDIRS:
        folder = channel / subdir
        if not folder.is_dir():
            continue
        for name in sorted(os.listdir(folder)):
            refuse_link(channel, folder / name, regular=name.endswith(file_suffixes))


def real_folder(channel: Path, *parts: str) -> Path:
    """channel/parts..., created if absent, refused unless it is a real folder whose real path is exactly there."""
    return channel_sandbox(channel).real_folder(*parts)


def inside(channel: Path, path: Path) -> None:
    """The last guard before a write: `path`'s real location is the one its name says, below the root."""
    channel_sandbox(channel).inside(path)
