"""Keep a wheel index root consistent, whatever interrupts or shares it.

The invariant, at every moment: every link of every page names a complete file in files/ with that
sha256 (and its W.metadata, when linked, with its sha256), and every page is whole (old or new).

- Wheels arrive under a name unique to the writing process and are renamed into place
  (faforge.sandbox.Sandbox.place_copy); pages are written beside themselves and renamed over the old.
- Pages are a function of the wheels in files/ (faforge.pipindex.placement, .pages): `heal` renders
  them all and rewrites those that differ, so a rerun after any interruption heals the root.
- Order: metadata files, then the project pages (what a glue wheel needs first), then each index's
  root page; only then are pages of projects or indexes that no longer exist removed, then unused
  metadata. A wheel replaced with --force first leaves the pages (heal with leave_out), then changes.
- Writers hold the root's lock file, so leftovers found under it are stale; nothing is written
  through a link (layout.check_links, before the lock and again under it).
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from faforge import untrusted
from faforge.errors import FaforgeError, why_not_a_folder
from faforge.pipindex import layout, ownership, pages
from faforge.pipindex.placement import PROJECTS, Placement, place
from faforge.pipwheel.facts import WheelFacts, read_wheel
from faforge.pipwheel.members import check_members, read_member
from faforge.sandbox import PART_SUFFIX


@dataclass(frozen=True)
class BadFile:
    """A file below the root that no page lists, and why."""

    path: str  # relative to the root
    reason: str


@dataclass
class Survey:
    """A root's wheels against its pages: what the pages must be, what they are."""

    wheels: dict[str, WheelFacts] = field(default_factory=dict)  # file name -> every readable wheel of files/
    bad: list[BadFile] = field(default_factory=list)
    placement: Placement = field(default_factory=lambda: place([]))
    expected: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes: pages and metadata files
    present: dict[str, bytes] = field(default_factory=dict)  # what the root holds of our pages and metadata files
    foreign: frozenset[str] = frozenset()  # pages at our paths that faforge did not write (faforge.pipindex.ownership)

    @property
    def to_write(self) -> list[str]:
        return sorted(
            (p for p in self.expected if self.present.get(p) != self.expected[p] and p not in self.foreign),
            key=_write_order,
        )

    @property
    def blocked(self) -> list[str]:
        """Pages faforge must write where a foreign page stands (it never rewrites one)."""
        return sorted(p for p in self.expected if p in self.foreign)

    @property
    def to_remove(self) -> list[str]:
        return sorted((p for p in self.present if p not in self.expected), key=_remove_order)

    @property
    def needs_writing(self) -> bool:
        return bool(self.to_write or self.to_remove)

    def drift_words(self) -> list[str]:
        new = [p for p in self.to_write if p not in self.present]
        changed = [p for p in self.to_write if p in self.present]
        return [
            f"{len(v)} {k}"
            for k, v in (("missing", new), ("out of date", changed), ("no longer listed", self.to_remove))
            if v
        ]

    def indexed(self) -> dict[str, tuple[str, ...]]:
        """file name -> the indexes listing it."""
        return {w.filename: self.placement.indexes_of(w.filename) for w in self.wheels.values()}


def _stage(path: str) -> int:
    parts = path.split("/")
    if parts[0] == layout.FILES:
        return 0
    if len(parts) == 3:
        return 1 + PROJECTS.index(parts[1]) if parts[1] in PROJECTS else 1 + len(PROJECTS)
    return 2 + len(PROJECTS)


def _write_order(path: str) -> tuple[int, str]:
    return _stage(path), path


def _remove_order(path: str) -> tuple[int, str]:
    """Root pages of a vanished index first (it then lists nothing), project pages next, metadata last."""
    return {0: 2, 2 + len(PROJECTS): 0}.get(_stage(path), 1), path


# Stands for a page or metadata file larger than an index page's cap: no page faforge writes is, so it differs.
TOO_BIG = b"\0(more bytes than an index page may have)"


def _read(path: Path) -> bytes | None:
    """A page or metadata file as the root holds it (check_links refused links and FIFOs first), None when absent;
    never more than an index page's cap is read or held."""
    cap = untrusted.CAPS["index page"]
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except FileNotFoundError:
        return None
    return TOO_BIG if len(data) > cap else data


def _present(root: Path) -> dict[str, bytes]:
    found = {}
    if (root / layout.FILES).is_dir():
        for name in sorted(os.listdir(root / layout.FILES)):
            if name.endswith(layout.METADATA_SUFFIX) and not name.startswith("."):
                found[f"{layout.FILES}/{name}"] = _read(root / layout.FILES / name)
    for index in layout.index_folders(root):
        candidates = [f"{index}/{page}" for page in layout.PAGES]
        candidates += [
            f"{index}/{p}/{page}"
            for p in sorted(os.listdir(root / index))
            if p in PROJECTS and (root / index / p).is_dir()
            for page in layout.PAGES
        ]
        found.update({rel: data for rel in candidates if (data := _read(root / rel)) is not None})
    return {rel: data for rel, data in found.items() if data is not None}


def core_metadata(wheel: WheelFacts) -> bytes:
    """The wheel's METADATA as it holds it, served beside it as W.metadata (PEP 658): the very member
    faforge.pipwheel.facts.read_wheel parsed (its .dist-info folder as the wheel spells it, found by
    dist_info_dir, the one home of that rule), read with the same refusals."""
    what = str(wheel.path)
    try:
        with zipfile.ZipFile(wheel.path) as archive:
            check_members(archive, what)
            return read_member(archive, f"{wheel.dist_info}/METADATA", what)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise FaforgeError(f"{what}: is not a readable zip file ({exc})", input=what) from None


def _read_wheels(
    root: Path, leave_out: frozenset[str], extra: tuple = ()
) -> tuple[dict, dict[str, bytes], list[BadFile]]:
    wheels, metadata, bad = {w.filename: w for w in extra}, {w.filename: core_metadata(w) for w in extra}, []
    folder = root / layout.FILES
    for name in sorted(os.listdir(folder)) if folder.is_dir() else []:
        rel = f"{layout.FILES}/{name}"
        if name.startswith(".") or name.endswith(layout.METADATA_SUFFIX) or name in leave_out or name in wheels:
            continue
        if not name.endswith(layout.WHEEL_SUFFIX):
            bad.append(BadFile(rel, "not a wheel (*.whl): no page lists it"))
            continue
        try:
            facts = read_wheel(folder / name)
            metadata[name] = core_metadata(facts)
        except FaforgeError as exc:
            bad.append(BadFile(rel, f"not a readable wheel ({exc.message.removeprefix(f'{folder / name}: ')})"))
            continue
        wheels[name] = facts
    return wheels, metadata, bad


def survey(root: Path, *, leave_out: frozenset[str] = frozenset(), extra: tuple = ()) -> Survey:
    """What the pages of `root` must be (its wheels, less the file names in `leave_out`, plus the wheels
    `extra` about to be copied in) and what they are; what is foreign there is reported, in `bad`."""
    layout.check_links(root)
    wheels, metadata, bad = _read_wheels(root, leave_out, extra)
    placement = place(wheels.values())
    bad += [BadFile(f"{layout.FILES}/{w.filename}", why) for w, why in placement.problems]
    expected = {}
    listed = {w.filename for ws in placement.indexes.values() for w in ws} | {w.filename for w, _ in placement.waiting}
    for name in sorted(listed):
        expected[f"{layout.FILES}/{pages.metadata_name(name)}"] = metadata[name]
    for index, members in placement.indexes.items():
        projects: dict[str, list[pages.Link]] = {}
        for wheel in members:
            projects.setdefault(wheel.name, []).append(
                pages.Link(
                    filename=wheel.filename,
                    sha256=wheel.sha256,
                    size=wheel.size,
                    version=wheel.version,
                    requires_python=wheel.requires_python,
                    metadata_sha256=hashlib.sha256(metadata[wheel.filename]).hexdigest(),
                )
            )
        expected.update(pages.index_pages(index, projects))
    present = _present(root)
    foreign = ownership.foreign_pages(present)
    bad += [BadFile(p, ownership.FOREIGN_PAGE) for p in foreign] + [
        BadFile(p, why) for p, why in ownership.foreign_entries(root)
    ]
    return Survey(
        wheels=wheels,
        bad=sorted(bad, key=lambda b: b.path),
        placement=placement,
        expected=expected,
        present={p: d for p, d in present.items() if p not in foreign},
        foreign=foreign,
    )


def heal(root: Path, *, leave_out: frozenset[str] = frozenset()) -> Survey:
    """Rewrite what differs and remove what no longer belongs, in the invariant's order (the caller holds
    the lock); returns the survey it acted on."""
    found = survey(root, leave_out=leave_out)
    ownership.refuse_blocked(root, found.blocked)
    box = layout.sandbox(root)
    for rel in found.to_write:
        *parts, name = rel.split("/")
        box.write_bytes(box.real_folder(*parts), name, found.expected[rel])
    for rel in found.to_remove:
        path = root / rel
        box.inside(path.parent)
        path.unlink(missing_ok=True)
    for rel in sorted({os.path.dirname(r) for r in found.to_remove if r.count("/") >= 1}, key=lambda r: -r.count("/")):
        if rel != layout.FILES:
            try:
                (root / rel).rmdir()  # only once empty: anything else someone put there stays
            except OSError:
                pass
    return found


def _remove_leftovers(root: Path) -> None:
    """Partial copies and pages of killed writers (check_links ran first: none of these is a link)."""
    folders = [root / layout.FILES] + [root / i for i in layout.index_folders(root)]
    folders += [
        f / p for f in folders[1:] for p in sorted(os.listdir(f)) if (f / p).is_dir() and not (f / p).is_symlink()
    ]
    for folder in folders:
        if folder.is_dir():
            for path in folder.glob(f".*{PART_SUFFIX}"):
                path.unlink(missing_ok=True)


@contextmanager
def index_lock(root: Path) -> Iterator[None]:
    """Hold the root's lock (one writer at a time) and clear what killed writers left behind."""
    check_folder(root)
    root.mkdir(parents=True, exist_ok=True)
    layout.check_links(root)
    with layout.sandbox(root).lock(layout.LOCK_FILE):
        layout.check_links(root)  # again under the lock: what another writer did before we got it
        _remove_leftovers(root)
        yield


def check_folder(root: Path) -> None:
    """Refuse a root, its files/ or an index folder that is something other than a folder."""
    for path in [root, root / layout.FILES]:
        if path.exists() and not path.is_dir():
            raise FaforgeError(
                f"wheel index path {path} {why_not_a_folder(path)}",
                hint=f"a wheel index and its {layout.FILES}/ must be folders; move the file away",
            )


def index_errors(root: Path) -> AbstractContextManager[None]:
    """A refused write (read-only, full, permissions): one line naming the path, exit 2."""
    return layout.sandbox(root).write_errors()
