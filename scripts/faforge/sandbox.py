"""A folder faforge publishes into is a sandbox: it writes only real folders and plain file names below
its root, follows no link there, lets one writer in at a time, and a file arrives whole or not at all.

The conda channel (faforge.channel.sandbox, faforge.channel.index) and the pip wheel index
(faforge.pipindex) are two such folders; each names its own folders and files, and both use these
guards, so the two cannot drift apart:

- `Sandbox.refuse_link` / `real_folder` / `inside`: a link where faforge reads or writes is exit 2
  before anything is written, and each write checks the real path against the root (the root itself
  may be a link: it is resolved once, the folder the user named);
- `Sandbox.place_copy`: a copy under a name only this process uses (O_NOFOLLOW, O_EXCL), fsynced, and
  renamed into place only when its bytes have the sha256 its gates passed for;
- `Sandbox.lock`: the root's lock file (fcntl), so leftovers found under it are stale;
- `Sandbox.write_errors`: a refused write (read-only, full, permissions) is one line naming the path, exit 2.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import EXIT_PROBLEMS, FaforgeError

PART_SUFFIX = ".part"  # a copy on its way in: .NAME.PID.HEX.part, removed under the lock when its writer died


def plain_name(name: str) -> bool:
    """A file name that stays in its folder and is not one of faforge's hidden working files."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".")


def open_new(path: Path) -> int:
    """A new file for writing, never through a link (O_NOFOLLOW, O_EXCL)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)


def fsync(path: Path) -> None:
    """On disk before the rename makes it visible, so a power cut cannot leave a renamed empty file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Sandbox:
    """The guards of one folder: `noun` names it in messages ("channel", "wheel index"), `link_hint`
    says what to do about a link found in it."""

    root: Path
    noun: str
    link_hint: str

    def refuse_link(self, path: Path, *, regular: bool = False) -> None:
        """Exit 2 when `path` (below the root) is a symbolic link, or, with `regular`, exists and is not
        a regular file (a FIFO or device would block or never end)."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            raise FaforgeError(
                f"{self.noun} {self.root}: {path.relative_to(self.root)} is a symbolic link (to {os.readlink(path)})",
                hint=self.link_hint,
            )
        if regular and not stat.S_ISREG(info.st_mode):
            raise FaforgeError(
                f"{self.noun} {self.root}: {path.relative_to(self.root)} is not a regular file",
                hint=f"move it out of the {self.noun}",
            )

    def real_folder(self, *parts: str) -> Path:
        """root/parts..., created if absent, refused unless it is a real folder whose real path is exactly there."""
        folder = self.root
        for part in parts:
            if not plain_name(part):
                raise FaforgeError(
                    f"{self.noun} {self.root}: {part!r} is not a plain folder name",
                    hint="report this; nothing was written",
                )
            folder = folder / part
            self.refuse_link(folder)
            folder.mkdir(exist_ok=True)
            self.refuse_link(folder)
        self.inside(folder)
        return folder

    def inside(self, path: Path) -> None:
        """The last guard before a write: `path`'s real location is the one its name says, below the root."""
        if os.path.realpath(path) != os.path.join(os.path.realpath(self.root), os.path.relpath(path, self.root)):
            raise FaforgeError(
                f"{self.noun} {self.root}: {path} resolves to {os.path.realpath(path)}, outside the folder it names",
                hint=self.link_hint,
            )

    def place_copy(self, source: Path, folder: Path, *, sha256: str, name: str | None = None) -> Path:
        """Copy `source` into `folder` (a real_folder) as `name` (default: its own), under a name only this
        process uses first; only a copy whose bytes have `sha256` is renamed into place."""
        name = name or source.name
        partial = folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}{PART_SUFFIX}"
        digest = hashlib.sha256()
        try:
            with open(source, "rb") as src, os.fdopen(open_new(partial), "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    dst.write(block)
                dst.flush()
                os.fsync(dst.fileno())
            if digest.hexdigest() != sha256:
                raise FaforgeError(
                    f"{source}: changed while it was copied (its sha256 "
                    f"is no longer {sha256[:12]}…), so it is not published",
                    exit_code=EXIT_PROBLEMS,
                    hint="verify and publish the file as it is now",
                )
            self.inside(folder)
            return partial.replace(folder / name)
        finally:
            partial.unlink(missing_ok=True)

    def write_bytes(self, folder: Path, name: str, data: bytes) -> Path:
        """folder/name (folder a real_folder, name plain) replaced whole by `data`: a new file beside it,
        fsynced, then one rename (which replaces a link at its destination, never writes through it)."""
        if not plain_name(name):
            raise FaforgeError(
                f"{self.noun} {self.root}: {name!r} is not a plain file name", hint="report this; nothing was written"
            )
        partial = folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}{PART_SUFFIX}"
        try:
            with os.fdopen(open_new(partial), "wb") as dst:
                dst.write(data)
                dst.flush()
                os.fsync(dst.fileno())
            self.inside(folder)
            return partial.replace(folder / name)
        finally:
            partial.unlink(missing_ok=True)

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold root/name (fcntl, exclusive) for the block: one writer at a time. The root is created if absent."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextmanager
    def write_errors(self) -> Iterator[None]:
        """The file system refused a write (read-only, full, permissions): one line naming the path, exit 2."""
        try:
            yield
        except OSError as exc:
            where = exc.filename or self.root
            raise FaforgeError(
                f"cannot write to {self.noun} {self.root}: {exc.strerror or exc} ({where})",
                hint=f"check that the folder is writable and has free space; files already in the {self.noun} "
                "were not changed",
            ) from None
