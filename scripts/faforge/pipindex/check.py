"""`faforge index --pip`: heal a root's pages, then judge every index of it; or, with --check, only read
and judge a root, one index folder or an index URL. Returns data; the command prints it."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from faforge.errors import FaforgeError, why_not_a_folder
from faforge.pipindex import layout
from faforge.pipindex.folder import BadFile, Survey, heal, index_errors, index_lock, survey
from faforge.pipindex.parse import Listing
from faforge.pipindex.read import read_local, read_remote
from faforge.pipindex.validate import validate


@dataclass(frozen=True)
class Report:
    where: str
    listings: dict[str, Listing]  # index name -> what was read of it
    problems: list[str]  # broken rules
    bad: list[BadFile] = field(default_factory=list)  # files no page lists
    found: Survey | None = None  # what a local root held (before healing, for reindex)
    healed: bool = False

    def lines(self) -> list[str]:
        out = []
        if self.found is not None:
            drift = self.found.drift_words()
            action = (
                (
                    "rewrote its pages (" + "; ".join(drift) + ")"
                    if self.healed
                    else "its pages differ (" + "; ".join(drift) + ")"
                )
                if drift
                else "pages were already right"
            )
            out.append(
                f"{self.where}: {len(self.found.wheels)} wheels, {len(self.found.placement.indexes)} indexes; {action}"
            )
            out += [f"  waiting: {w.filename}: {why}" for w, why in self.found.placement.waiting]
        for name, listing in self.listings.items():
            files = listing.files()
            counts = ", ".join(f"{project} ({len(links)} files)" for project, links in files.items()) or "no project"
            formats = "+".join(listing.roots) or "no page"
            out.append(f"{name}: {counts} [{formats}] {listing.url}")
        return out


def _folder(root: Path) -> None:
    if not root.is_dir():
        raise FaforgeError(
            f"wheel index folder {root} {why_not_a_folder(root)}",
            input=str(root),
            hint="pass the folder `faforge publish --index` wrote (default ./wheels)",
        )


def _judge_root(root: Path) -> tuple[dict[str, Listing], list[str]]:
    listings, problems = {}, []
    for name in layout.index_folders(root):
        listings[name] = read_local(root / name)
        problems += validate(listings[name], index=name, files=root / layout.FILES)
    return listings, problems


def reindex(root: Path) -> Report:
    """Rewrite what differs under the lock, then read every index back and judge it."""
    _folder(root)
    with index_errors(root), index_lock(root):
        found = heal(root)
        listings, problems = _judge_root(root)
    return Report(str(root), listings, problems, found.bad, found, healed=True)


def check_index(where: str) -> Report:
    """Read-only: an index URL (BASE/torch2.11-cu130/), a root, or one index folder of a root."""
    if where.startswith(("http://", "https://")):
        listing = read_remote(where)
        name = urllib.parse.unquote(urllib.parse.urlparse(listing.url).path.rstrip("/").rsplit("/", 1)[-1])
        return Report(where, {name: listing}, validate(listing, index=name))
    path = Path(where)
    _folder(path)
    if layout.parse_index_name(path.name) and not (path / layout.FILES).is_dir():
        listing = read_local(path)
        return Report(where, {path.name: listing}, validate(listing, index=path.name, files=path.parent / layout.FILES))
    found = survey(path)
    listings, problems = _judge_root(path)
    if found.needs_writing:
        problems.append(
            f"{path}: its pages are not what its wheels give ({'; '.join(found.drift_words())}); "
            f"run `faforge index --pip {path}`"
        )
    return Report(where, listings, problems, found.bad, found)
