"""Decide which packages may be published, then publish exactly those.

A package may go out only if the manifest shows every required gate `passed` for its exact
sha256. `skipped` is not `passed` (a missing GPU never counts as a pass), and a `failed`
gate refuses the package whatever is required, so a known-broken file never ships.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from faforge.channel.index import BadFile, channel_errors, channel_lock, check_folder, heal, naming_problem, place_file, rebuild, Survey, survey
from faforge.release.manifest import GATES, GateResult, results_for
from faforge.release.package import PackageFacts
from faforge.release.targets import Target, upload


@dataclass(frozen=True)
class Decision:
    package: PackageFacts
    results: dict[str, GateResult]
    allowed: bool
    reason: str

    def gate_words(self) -> str:
        return ", ".join(f"{g}: {self.results[g].result if g in self.results else 'not run'}" for g in GATES)


def judge(package: PackageFacts, manifest_dir: Path, required: tuple[str, ...]) -> Decision:
    results = results_for(manifest_dir, package.sha256)
    failed = [g for g in GATES if g in results and results[g].result == "failed"]
    if failed:
        detail = "; ".join(f"{g}: failed ({results[g].detail})" for g in failed)
        return Decision(package, results, False, detail)
    missing = [f"{g}: {results[g].result if g in results else 'not run'}" for g in required
               if g not in results or results[g].result != "passed"]
    if missing:
        return Decision(package, results, False, "; ".join(missing))
    return Decision(package, results, True, "all required gates passed: " + ", ".join(required))


@dataclass(frozen=True)
class Outcome:
    package: PackageFacts
    action: str  # published | unchanged | exists | refused | would-publish
    detail: str


@dataclass(frozen=True)
class Published:
    outcomes: list[Outcome]
    channel_problems: list[BadFile] = field(default_factory=list)  # files already in a folder channel that cannot be indexed


def publish(decisions: list[Decision], target: Target, *, dry_run: bool, force: bool) -> Published:
    outcomes = [Outcome(d.package, "refused", d.reason) for d in decisions if not d.allowed]
    allowed = []
    for pkg in (d.package for d in decisions if d.allowed):
        # Refused before anything is copied: an index (ours or a server's) would not list it.
        problem = naming_problem(pkg.filename, pkg.name, pkg.version, pkg.build) or ("" if pkg.subdir else "its metadata names no subdir")
        if problem:
            outcomes.append(Outcome(pkg, "refused", f"cannot be indexed: {problem}"))
        else:
            allowed.append(pkg)
    if target.kind == "folder":
        result = _publish_to_folder(allowed, Path(target.url), dry_run=dry_run, force=force)
    elif dry_run:
        result = Published([Outcome(p, "would-publish", str(target)) for p in allowed])
    else:
        if allowed:
            upload(target, [(p.path, p.subdir) for p in allowed], force=force)
        result = Published([Outcome(p, "published", str(target)) for p in allowed])
    order = {d.package.path: i for i, d in enumerate(decisions)}
    return Published(sorted(outcomes + result.outcomes, key=lambda o: order[o.package.path]), result.channel_problems)


def _publish_to_folder(packages: list[PackageFacts], channel: Path, *, dry_run: bool, force: bool) -> Published:
    """Copy, then heal the index; "unchanged" only when both the file and its index entry are right.

    A file replaced with --force first leaves the index, then changes, then is indexed again, so no
    moment shows an entry whose file has another sha256.
    """
    check_folder(channel, sorted({p.subdir for p in packages}))
    if not packages:
        return Published([])
    if dry_run:
        before = survey(channel) if channel.is_dir() else Survey(subdirs=[])
        return Published([_plan(p, channel, before, force)[0] for p in packages])
    with channel_errors(channel), channel_lock(channel):
        before = survey(channel)
        plans = [_plan(p, channel, before, force) for p in packages]
        outcomes = [Outcome(o.package, "published", o.detail) if o.action == "would-publish" else o for o, _ in plans]
        moving = [o.package for o, copy in plans if copy]
        leaving = frozenset(f"{p.subdir}/{p.filename}" for p in moving) & set(before.entries)
        if leaving:
            rebuild(channel, before, leave_out=leaving)
        for pkg in moving:
            place_file(pkg.path, channel / pkg.subdir)
        after = heal(channel)
    return Published(outcomes, after.bad)


def _plan(pkg: PackageFacts, channel: Path, before: Survey, force: bool) -> tuple[Outcome, bool]:
    """What publishing `pkg` into `channel` does, and whether its file must be copied."""
    rel = f"{pkg.subdir}/{pkg.filename}"
    where = f"{channel}/{rel}"
    if rel not in before.files:
        return Outcome(pkg, "would-publish", where), True
    if before.files[rel][1] == pkg.sha256:
        if before.entries.get(rel) == before.files[rel]:
            return Outcome(pkg, "unchanged", f"identical file and index entry already in {channel}"), False
        return Outcome(pkg, "would-publish", f"{where} (the identical file is there but not indexed; indexing it)"), False
    if force:
        return Outcome(pkg, "would-publish", f"{where} (replacing a different file)"), True
    return Outcome(pkg, "exists", f"a different file of this name is already in {channel}; pass --force to replace it"), False
