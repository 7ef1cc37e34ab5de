"""What a local channel holds against what its index says: every package file's size and sha256, every
repodata.json entry, and why a file cannot be indexed (faforge.channel.index acts on the result).

The channel's own file names are here too, since the link check (faforge.channel.sandbox) must know
every name faforge reads or writes in a channel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from faforge import untrusted
from faforge.channel.archive import read_index_json
from faforge.channel.sandbox import SUBDIRS, check_channel
from faforge.errors import FaforgeError
from faforge.packagefile import PACKAGE_SUFFIXES, sha256_of
from faforge.sandbox import PART_SUFFIX

LOCK_FILE = ".faforge.lock"
STAGING_PREFIX = ".faforge-index-"
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
        words = [
            f"{len(v)} {k}"
            for k, v in (
                ("not indexed", self.unindexed),
                ("indexed without a file", self.orphaned),
                ("with a wrong sha256 or size", self.mismatched),
            )
            if v
        ]
        words += [f"{s}/{REPODATA} missing or unreadable" for s in self.unreadable_index]
        return words


def naming_problem(filename: str, name: str, version: str, build: str) -> str | None:
    """conda clients find a package only by name-version-build; index_fs skips any other name."""
    suffix = next((s for s in PACKAGE_SUFFIXES if filename.endswith(s)), ".conda")
    expected = f"{name}-{version}-{build}{suffix}"
    return (
        None
        if filename == expected
        else f"its metadata says {expected}; conda clients only find a package under that name"
    )


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
    return [
        BadFile(f"{d.name}/{f.name}", f"{d.name}/ is not a platform folder faforge indexes ({', '.join(SUBDIRS)})")
        for d in sorted(channel.iterdir(), key=lambda p: p.name)
        if d.name not in SUBDIRS and not d.name.startswith(".") and d.is_dir() and not d.is_symlink()
        for f in sorted(d.iterdir())
        if f.name.endswith(PACKAGE_SUFFIXES)
    ]


def check_links(channel: Path) -> None:
    """Exit 2 for a link where faforge reads or writes in `channel` (faforge.channel.sandbox)."""
    check_channel(channel, (LOCK_FILE, STAGING_PREFIX, ".tmp"), (*PACKAGE_SUFFIXES, *INDEX_OUTPUTS, PART_SUFFIX))


def read_entries(repodata: Path) -> dict[str, tuple[int, str]] | None:
    try:
        data = untrusted.load_json(repodata, "repodata")
        return {
            name: (int(rec["size"]), str(rec["sha256"]))
            for key in ("packages", "packages.conda")
            for name, rec in (data.get(key) or {}).items()
        }
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
        entries = read_entries(folder / REPODATA)
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
