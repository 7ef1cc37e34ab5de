"""Copy wheels into an index root and heal its pages, under the root's lock (faforge.pipindex.folder).

Which wheels may come is decided above (faforge.release.publish.wheels: the gates, per sha256); this
layer copies exactly what it is given, each copy renamed in only with the sha256 it was judged for.

A wheel supersedes the files of its slot (project, version and tags) with another build tag: a glue
rebuilt from other inputs (its build tag 0h<hash> names them) replaces the stale one, which first leaves
every page, then files/. pip orders two files of one slot by their build tags' letters, so a stale build
left beside the new one could be the one installed. A cut run leaves both files; publishing the new one
again removes the old.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from faforge.pipindex import layout
from faforge.pipindex.folder import BadFile, Survey, check_folder, heal, index_errors, index_lock, survey
from faforge.pipindex.ownership import refuse_blocked
from faforge.pipindex.placement import place
from faforge.pipwheel.facts import WheelFacts, identity


@dataclass(frozen=True)
class Outcome:
    wheel: WheelFacts
    action: str  # published | unchanged | exists | refused | would-publish
    detail: str
    indexes: tuple[str, ...] = ()  # the indexes that list it (would list it, in a dry run)


@dataclass(frozen=True)
class IndexPublished:
    outcomes: list[Outcome]
    problems: list[BadFile] = field(default_factory=list)  # files already in the root that no page can list


def publish_wheels(wheels: list[WheelFacts], root: Path, *, dry_run: bool, force: bool) -> IndexPublished:
    """Copy, then heal the pages; "unchanged" only when the file is there and every page was already right.

    A wheel replaced with --force first leaves the pages, then changes, then is listed again, so no
    moment shows a link whose file has another sha256.
    """
    check_folder(root)
    if not wheels:
        return IndexPublished([])
    if dry_run:
        before = survey(root) if root.is_dir() else Survey()
        plans = [_plan(w, root, before, force) for w in wheels]
        stale = superseded([p.wheel for p, _ in plans if p.action != "exists"], before.wheels)
        kept = [
            w
            for name, w in before.wheels.items()
            if name not in {p.wheel.filename for p, copy in plans if copy} | set(stale)
        ]
        placed = place(kept + [p.wheel for p, copy in plans if copy])
        if root.is_dir():
            refuse_blocked(
                root,
                survey(
                    root,
                    leave_out=frozenset(set(before.wheels) - {w.filename for w in kept}),
                    extra=tuple(p.wheel for p, copy in plans if copy),
                ).blocked,
            )
        return IndexPublished(
            [Outcome(p.wheel, p.action, p.detail, placed.indexes_of(p.wheel.filename)) for p, _ in plans]
        )
    with index_errors(root), index_lock(root):
        before = survey(root)
        plans = [_plan(w, root, before, force) for w in wheels]
        moving = [p.wheel for p, copy in plans if copy]
        stale = superseded([p.wheel for p, _ in plans if p.action != "exists"], before.wheels)
        leaving = (frozenset(w.filename for w in moving) & set(before.wheels)) | frozenset(stale)
        refuse_blocked(root, survey(root, leave_out=leaving, extra=tuple(moving)).blocked)  # before any write
        if leaving:
            heal(root, leave_out=leaving)
        box = layout.sandbox(root)
        for wheel in moving:
            box.place_copy(wheel.path, box.real_folder(layout.FILES), sha256=wheel.sha256)
        folder = box.real_folder(layout.FILES)
        for name in stale:
            (folder / name).unlink(missing_ok=True)
        after = heal(root)
    outcomes = []
    for p, _ in plans:
        gone = sorted(old for old, by in stale.items() if by == p.wheel.filename)
        detail = p.detail + (
            f" (supersedes {', '.join(gone)}: the same version and tags, another build)" if gone else ""
        )
        action = "published" if p.action == "would-publish" or (gone and p.action == "unchanged") else p.action
        outcomes.append(Outcome(p.wheel, action, detail, after.placement.indexes_of(p.wheel.filename)))
    return IndexPublished(outcomes, after.bad)


def slot(wheel: WheelFacts) -> tuple[str, Version, tuple[str, ...]]:
    """What pip tells two files of one project apart by, but for the build tag (faforge.pipwheel.facts.identity)."""
    name, version, _, tags = identity(wheel)
    return name, version, tags


def superseded(published: list[WheelFacts], held: dict[str, WheelFacts]) -> dict[str, str]:
    """{file in the root: the published wheel's file name} for every held file of a published wheel's slot
    with another name (another build tag)."""
    by_slot = {slot(w): w.filename for w in published}
    return {name: by_slot[slot(w)] for name, w in held.items() if slot(w) in by_slot and name != by_slot[slot(w)]}


def _plan(wheel: WheelFacts, root: Path, before: Survey, force: bool) -> tuple[Outcome, bool]:
    """What publishing `wheel` into `root` does, and whether its file must be copied."""
    where = f"{root}/{layout.FILES}/{wheel.filename}"
    held = before.wheels.get(wheel.filename)
    if held is None and not (root / layout.FILES / wheel.filename).exists():
        return Outcome(wheel, "would-publish", where), True
    if held is not None and held.sha256 == wheel.sha256:
        if not before.needs_writing:
            return Outcome(wheel, "unchanged", f"identical file and pages already in {root}"), False
        return Outcome(
            wheel, "would-publish", f"{where} (the identical file is there; writing the pages it is missing from)"
        ), False
    if force:
        return Outcome(wheel, "would-publish", f"{where} (replacing a different file)"), True
    other = f" (sha256 {held.sha256[:12]}…)" if held is not None else ""
    return Outcome(
        wheel, "exists", f"a different file{other} of this name is in {root}/{layout.FILES}; pass --force to replace it"
    ), False
