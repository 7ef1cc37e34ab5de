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
import fcntl
import hashlib
import os
import secrets
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from faforge import untrusted
from faforge.channel.archive import read_index_json
from faforge.channel.sandbox import SUBDIRS, check_channel, inside, open_new, plain_name, real_folder
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.packagefile import PACKAGE_SUFFIXES, sha256_of

LOCK_FILE = ".faforge.lock"
STAGING_PREFIX = ".faforge-index-"
PART_SUFFIX = ".part"
REPODATA = "repodata.json"
# What index_fs writes per subdir, renamed in this order: each step leaves a consistent index.
INDEX_OUTPUTS = ("repodata_shards.msgpack.zst", "repodata.json.zst", REPODATA)
SHARDS_DIR = "shards"


@dataclass(frozen=True)
class BadFile:
    """A file in the channel that cannot be indexed, and why."""

    path: str  # subdir/filename
    reason: str


@dataclass
class Survey:
    """A channel's files against its repodata.json files."""

    subdirs: list[str]
    files: dict[str, tuple[int, str]] = field(default_factory=dict)  # subdir/name -> (size, sha256)
    entries: dict[str, tuple[int, str]] = field(default_factory=dict)
    unreadable_index: list[str] = field(default_factory=list)  # subdirs whose repodata.json is missing or broken
    bad: list[BadFile] = field(default_factory=list)

    @property
    def unindexed(self) -> list[str]:
        return sorted(set(self.files) - set(self.entries))

    @property
    def orphaned(self) -> list[str]:
        """Entries without a file."""
        return sorted(set(self.entries) - set(self.files))

    @property
    def mismatched(self) -> list[str]:
        return sorted(p for p in set(self.files) & set(self.entries) if self.files[p] != self.entries[p])

    @property
    def indexable(self) -> dict[str, tuple[int, str]]:
        bad = {b.path for b in self.bad}
        return {p: facts for p, facts in self.files.items() if p not in bad}

    @property
    def needs_index(self) -> bool:
        bad = {b.path for b in self.bad}
        return bool(self.unreadable_index or self.orphaned or self.mismatched or set(self.unindexed) - bad)

    def drift_words(self) -> list[str]:
        words = [f"{len(v)} {k}" for k, v in (("not indexed", self.unindexed), ("indexed without a file", self.orphaned),
                                              ("with a wrong sha256 or size", self.mismatched)) if v]
        words += [f"{s}/{REPODATA} missing or unreadable" for s in self.unreadable_index]
        return words


def naming_problem(filename: str, name: str, version: str, build: str) -> str | None:
    """conda clients find a package only by name-version-build; index_fs skips any other name."""
    suffix = next((s for s in PACKAGE_SUFFIXES if filename.endswith(s)), ".conda")
    expected = f"{name}-{version}-{build}{suffix}"
    return None if filename == expected else f"its metadata says {expected}; conda clients only find a package under that name"


def inspect_package(path: Path, subdir: str) -> str | None:
    """Why `path` cannot be indexed in `subdir`, or None when it can."""
    try:
        meta = read_index_json(path)
    except FaforgeError as exc:
        return f"not a readable conda package ({exc.message.removeprefix(f'{path}: ')})"
    problem = naming_problem(path.name, meta["name"], meta["version"], meta["build"])
    if problem:
        return problem
    if meta["subdir"] != subdir:
        return f"its metadata says subdir {meta['subdir']}, but it lies in {subdir}/"
    return None


def _subdirs(channel: Path) -> list[str]:
    found = {s for s in SUBDIRS if (channel / s).is_dir()}
    return sorted(found | {"noarch"})  # clients expect noarch/ in every channel


def _stray_packages(channel: Path) -> list[BadFile]:
    """Package files in a folder that is not a platform faforge indexes: named, never indexed."""
    return [BadFile(f"{d.name}/{f.name}", f"{d.name}/ is not a platform folder faforge indexes ({', '.join(SUBDIRS)})")
            for d in sorted(channel.iterdir(), key=lambda p: p.name)
            if d.name not in SUBDIRS and not d.name.startswith(".") and d.is_dir() and not d.is_symlink()
            for f in sorted(d.iterdir()) if f.name.endswith(PACKAGE_SUFFIXES)]


def check_links(channel: Path) -> None:
    """Exit 2 for a link where faforge reads or writes in `channel` (faforge.channel.sandbox)."""
    check_channel(channel, (LOCK_FILE, STAGING_PREFIX, ".tmp"), (*PACKAGE_SUFFIXES, *INDEX_OUTPUTS, PART_SUFFIX))


def _read_entries(repodata: Path) -> dict[str, tuple[int, str]] | None:
    try:
        data = untrusted.load_json(repodata, "repodata")
        return {name: (int(rec["size"]), str(rec["sha256"]))
                for key in ("packages", "packages.conda") for name, rec in (data.get(key) or {}).items()}
    except (FaforgeError, ValueError, KeyError, TypeError, AttributeError):
        return None


def survey(channel: Path) -> Survey:
    """Compare every subdir's package files with its repodata.json, and inspect what is not indexed right."""
    check_links(channel)
    result = Survey(subdirs=_subdirs(channel), bad=_stray_packages(channel))
    for subdir in result.subdirs:
        folder = channel / subdir
        if not folder.is_dir():
            if subdir == "noarch":  # a fresh channel: index it so that clients find an (empty) noarch/
                result.unreadable_index.append(subdir)
            continue
        entries = _read_entries(folder / REPODATA)
        if entries is None:
            result.unreadable_index.append(subdir)
            entries = {}
        result.entries.update({f"{subdir}/{name}": facts for name, facts in entries.items()})
        for path in sorted(folder.iterdir()):
            if path.name.startswith(".") or not path.name.endswith(PACKAGE_SUFFIXES) or not path.is_file():
                continue
            result.files[f"{subdir}/{path.name}"] = (path.stat().st_size, sha256_of(path))
    for rel in set(result.unindexed) | set(result.mismatched):
        reason = inspect_package(channel / rel, rel.split("/")[0])
        if reason:
            result.bad.append(BadFile(rel, reason))
    result.bad.sort(key=lambda b: b.path)
    return result


@contextmanager
def channel_lock(channel: Path):
    """Hold the channel's lock (one writer at a time) and clear what killed writers left behind."""
    channel.mkdir(parents=True, exist_ok=True)
    check_links(channel)
    fd = os.open(channel / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        check_links(channel)  # again under the lock: what another writer did before we got it
        _remove_leftovers(channel)
        yield
    finally:
        os.close(fd)


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
        raise FaforgeError(f"{source}: not copied into {channel}: {subdir}/{source.name} is not a platform folder and package file name",
                           hint=f"platform folders are {', '.join(SUBDIRS)}; nothing was written")
    folder = real_folder(channel, subdir)
    partial = folder / f".{source.name}.{os.getpid()}.{secrets.token_hex(4)}{PART_SUFFIX}"
    digest = hashlib.sha256()
    try:
        with open(source, "rb") as src, os.fdopen(open_new(partial), "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
                dst.write(block)
            dst.flush()
            os.fsync(dst.fileno())
        if digest.hexdigest() != sha256:
            raise FaforgeError(f"{source}: changed while it was copied (its sha256 is no longer {sha256[:12]}…), so it is not published",
                               exit_code=EXIT_PROBLEMS, hint="verify and publish the file as it is now")
        inside(channel, folder)
        return partial.replace(folder / source.name)
    finally:
        partial.unlink(missing_ok=True)


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
        child = subprocess.run([sys.executable, "-m", "faforge.channel.rattler_index", str(staging)],
                               capture_output=True, text=True, check=False)
        if child.returncode != 0:
            why = (child.stderr.strip().splitlines() or [f"exit status {child.returncode}"])[-1]
            raise FaforgeError(f"py-rattler could not index {channel}: {why}", exit_code=EXIT_PROBLEMS,
                               hint=f"nothing in the channel was changed; rerun `faforge index {channel}`")
        written = {}
        for subdir in found.subdirs:
            entries = _read_entries(staging / subdir / REPODATA)
            if entries is None:
                raise FaforgeError(f"py-rattler wrote no {subdir}/{REPODATA} for {channel}", exit_code=EXIT_PROBLEMS)
            written.update({f"{subdir}/{name}": facts for name, facts in entries.items()})
        if written != expected:
            differ = sorted(set(written.items()) ^ set(expected.items()))
            raise FaforgeError(f"py-rattler's index of {channel} does not match its files: {differ[:3]}",
                               exit_code=EXIT_PROBLEMS, hint="nothing in the channel was changed; report this with the files named")
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
            _fsync(staged / name)
            (staged / name).replace(folder / name)


def _fsync(path: Path) -> None:
    """On disk before the rename makes it visible, so a power cut cannot leave a renamed empty file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def heal(channel: Path) -> Survey:
    """Re-index what differs (the caller holds the lock); returns what was found before."""
    found = survey(channel)
    if found.needs_index:
        rebuild(channel, found)
    return found


def check_folder(channel: Path, subdirs=()) -> None:
    """Refuse a channel path, or a subdir of it, that is something other than a folder."""
    for path in [channel, *(channel / s for s in subdirs)]:
        if path.exists() and not path.is_dir():
            raise FaforgeError(f"channel path {path} is a file, not a folder",
                               hint="a channel and its platform subdirs (linux-64, noarch, ...) must be folders; move the file away")


@contextmanager
def channel_errors(channel: Path):
    """The file system refused a write (read-only, full, permissions): one line naming the path, exit 2."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or channel
        raise FaforgeError(f"cannot write to channel {channel}: {exc.strerror or exc} ({where})",
                           hint="check that the folder is writable and has free space; files already in the channel were not changed") from None
