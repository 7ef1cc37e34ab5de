"""A local channel is a sandbox: faforge writes only real folders and files below its root.

Every path written under a channel is built from validated parts: a platform folder from the
closed set SUBDIRS, and a plain file name. No symbolic link is followed below the root: a
platform folder, a file in one, its shards/ folder, the lock file or a staging folder that is a
link is refused (exit 2) before anything is written, and the writes themselves open with
O_NOFOLLOW and check the real path against the root. The root itself may be a link (it is
resolved once: the folder the user named).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from faforge.errors import FaforgeError

# The platform folders faforge publishes and indexes; a package says which in its info/index.json.
SUBDIRS = ("linux-64", "linux-aarch64", "noarch")
# conda's (platform, arch) of each, as index.json spells them; noarch packages name neither.
PLATFORM_ARCH = {"linux-64": ("linux", "x86_64"), "linux-aarch64": ("linux", "aarch64"), "noarch": (None, None)}
LINK_HINT = ("faforge follows no link inside a channel; replace the link with the real folder or file "
             "(or point --to at the real channel folder)")


def subdir_problem(subdir, platform, arch) -> str | None:
    """Why an index.json's subdir is not one faforge may write to (outside the closed set, or
    disagreeing with the package's own platform and arch), or None."""
    if subdir not in SUBDIRS:
        return f'"subdir" is {subdir!r}, not one of {", ".join(SUBDIRS)}'
    if (platform, arch) != PLATFORM_ARCH[subdir]:
        want = "no platform and no arch" if subdir == "noarch" else "platform {!r}, arch {!r}".format(*PLATFORM_ARCH[subdir])
        return f'"subdir" {subdir!r} needs {want}, but "platform" is {platform!r} and "arch" is {arch!r}'
    return None


def plain_name(name: str) -> bool:
    """A file name that stays in its folder and is not one of faforge's hidden working files."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".")


def refuse_link(channel: Path, path: Path, *, regular: bool = False) -> None:
    """Exit 2 when `path` (below `channel`) is a symbolic link, or, with `regular`, exists and is
    not a regular file (a FIFO or device would block or never end)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise FaforgeError(f"channel {channel}: {path.relative_to(channel)} is a symbolic link (to {os.readlink(path)})",
                           hint=LINK_HINT)
    if regular and not stat.S_ISREG(info.st_mode):
        raise FaforgeError(f"channel {channel}: {path.relative_to(channel)} is not a regular file", hint="move it out of the channel")


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
    folder = channel
    for part in parts:
        if not plain_name(part):
            raise FaforgeError(f"channel {channel}: {part!r} is not a plain folder name", hint="report this; nothing was written")
        folder = folder / part
        refuse_link(channel, folder)
        folder.mkdir(exist_ok=True)
        refuse_link(channel, folder)
    inside(channel, folder)
    return folder


def inside(channel: Path, path: Path) -> None:
    """The last guard before a write: `path`'s real location is the one its name says, below the root."""
    if os.path.realpath(path) != os.path.join(os.path.realpath(channel), os.path.relpath(path, channel)):
        raise FaforgeError(f"channel {channel}: {path} resolves to {os.path.realpath(path)}, outside the folder it names",
                           hint=LINK_HINT)


def open_new(path: Path) -> int:
    """A new file for writing, never through a link (O_NOFOLLOW, O_EXCL)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
