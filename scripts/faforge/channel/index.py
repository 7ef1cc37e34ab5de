"""Keep a local channel folder consistent, whatever interrupts or shares it.

The invariant, at every moment: each repodata.json entry names a complete file with that sha256
and size, and each repodata.json is whole (old or new). A file present but not yet indexed is
transient; the next `publish` or `index` heals it.

- Package files arrive under a name unique to the writing process and are renamed into place.
- The index is rebuilt by py-rattler's index_fs in a staging folder of hard links to the files
  that can be indexed; each output is then renamed over the old one. Staging (rather than writing
  repodata.json ourselves) keeps py-rattler's exact output, including repodata.json.zst and the
  sharded index that clients prefer and that a hand-written repodata.json would leave stale.
- index_fs runs in a child process (faforge.channel.rattler_index explains why), and its output is
  checked against the files before anything is renamed.
- Writers hold the channel's lock file (fcntl), so leftovers found under the lock are stale.
- Nothing is written through a link (faforge.channel.sandbox): only the platform folders of the
  closed set are indexed, and a channel with a link where faforge reads or writes is refused.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from faforge.channel.sandbox import SUBDIRS, channel_sandbox, plain_name, real_folder
from faforge.channel.survey import (
    INDEX_OUTPUTS,
    LOCK_FILE,
    PART_SUFFIX,
    REPODATA,
    SHARDS_DIR,
    STAGING_PREFIX,
    Survey,
    check_links,
    read_entries,
    survey,
)
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.packagefile import PACKAGE_SUFFIXES
from faforge.sandbox import fsync


@contextmanager
def channel_lock(channel: Path) -> Iterator[None]:
    """Hold the channel's lock (one writer at a time) and clear what killed writers left behind."""
    channel.mkdir(parents=True, exist_ok=True)
    check_links(channel)
    with channel_sandbox(channel).lock(LOCK_FILE):
        check_links(channel)  # again under the lock: what another writer did before we got it
        _remove_leftovers(channel)
        yield


def _remove_leftovers(channel: Path) -> None:
    """Stale staging folders and partial files; check_links ran first, so none of these is a link
    and no glob reaches through one."""
    for path in channel.glob(f"{STAGING_PREFIX}*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
    for subdir in SUBDIRS:
        folder = channel / subdir
        if folder.is_dir() and not folder.is_symlink():
            for path in folder.glob(f".*{PART_SUFFIX}"):
                path.unlink(missing_ok=True)
    try:
        (channel / ".tmp").rmdir()  # the empty folder older index_fs runs left in the channel
    except OSError:
        pass


def place_file(source: Path, channel: Path, subdir: str, *, sha256: str) -> Path:
    """Copy `source` into channel/subdir under a name only this process uses, then rename it into
    place; only a copy whose bytes have `sha256` (the sha256 its gates passed for) is renamed."""
    if subdir not in SUBDIRS or not plain_name(source.name) or not source.name.endswith(PACKAGE_SUFFIXES):
        raise FaforgeError(
            f"{source}: not copied into {channel}: {subdir}/{source.name} "
            "is not a platform folder and package file name",
            hint=f"platform folders are {', '.join(SUBDIRS)}; nothing was written",
        )
    return channel_sandbox(channel).place_copy(source, real_folder(channel, subdir), sha256=sha256)


def _link_or_copy(source: Path, dest: Path) -> None:
    try:
        os.link(source, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(source, dest)


def rebuild(channel: Path, found: Survey, *, leave_out: frozenset[str] = frozenset()) -> None:
    """Index every indexable file (minus `leave_out`, as subdir/name) and rename the index into place."""
    staging = channel / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    expected = {p: facts for p, facts in found.indexable.items() if p not in leave_out}
    try:
        for subdir in found.subdirs:
            (staging / subdir).mkdir(parents=True)
        for rel in expected:
            _link_or_copy(channel / rel, staging / rel)
        child = subprocess.run(
            [sys.executable, "-m", "faforge.channel.rattler_index", str(staging)],
            capture_output=True,
            text=True,
            check=False,
        )
        if child.returncode != 0:
            why = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
            raise FaforgeError(
                f"py-rattler could not index {channel}: {why}",
                exit_code=EXIT_PROBLEMS,
                hint=f"nothing in the channel was changed; rerun `faforge index {channel}`",
            )
        written = {}
        for subdir in found.subdirs:
            entries = read_entries(staging / subdir / REPODATA)
            if entries is None:
                raise FaforgeError(f"py-rattler wrote no {subdir}/{REPODATA} for {channel}", exit_code=EXIT_PROBLEMS)
            written.update({f"{subdir}/{name}": facts for name, facts in entries.items()})
        if written != expected:
            differ = sorted(set(written.items()) ^ set(expected.items()))
            raise FaforgeError(
                f"py-rattler's index of {channel} does not match its files: {differ[:3]}",
                exit_code=EXIT_PROBLEMS,
                hint="nothing in the channel was changed; report this with the files named",
            )
        for subdir in found.subdirs:
            _install_index(staging / subdir, channel, subdir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _install_index(staged: Path, channel: Path, subdir: str) -> None:
    """Shards first (content-addressed names), then each index file by one rename (a rename
    replaces a link at its destination, never writes through it)."""
    folder = real_folder(channel, subdir)
    if (staged / SHARDS_DIR).is_dir():
        shards = real_folder(channel, subdir, SHARDS_DIR)
        for shard in (staged / SHARDS_DIR).iterdir():
            shard.replace(shards / shard.name)
    for name in INDEX_OUTPUTS:
        if (staged / name).exists():
            fsync(staged / name)
            (staged / name).replace(folder / name)


def heal(channel: Path) -> Survey:
    """Re-index what differs (the caller holds the lock); returns what was found before."""
    found = survey(channel)
    if found.needs_index:
        rebuild(channel, found)
    return found


def check_folder(channel: Path, subdirs: Iterable[str] = ()) -> None:
    """Refuse a channel path, or a subdir of it, that is something other than a folder."""
    for path in [channel, *(channel / s for s in subdirs)]:
        if path.exists() and not path.is_dir():
            raise FaforgeError(
                f"channel path {path} is a file, not a folder",
                hint="a channel and its platform subdirs (linux-64, noarch, ...) must be folders; move the file away",
            )


def channel_errors(channel: Path) -> AbstractContextManager[None]:
    """The file system refused a write (read-only, full, permissions): one line naming the path, exit 2."""
    return channel_sandbox(channel).write_errors()
