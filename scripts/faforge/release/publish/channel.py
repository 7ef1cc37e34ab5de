"""Decide which packages may be published, then publish exactly those.

A package may go out only if the manifest shows every required gate `passed` for its exact
sha256. `skipped` is not `passed` (a missing GPU never counts as a pass), and a `failed`
gate refuses the package whatever is required, so a known-broken file never ships. A flash-attn
that pins its kernel build (libflash-attn-kernels, the split build) goes out only with that exact kernel
package, allowed in the same publish, or already in the channel: alone it could not be installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from faforge.channel.index import channel_errors, channel_lock, check_folder, heal, place_file, rebuild
from faforge.channel.repodata import ChannelNotFound, query
from faforge.channel.survey import BadFile, Survey, naming_problem, survey
from faforge.matrix.kernels import KERNEL_PACKAGE, kernel_pin
from faforge.release.manifest import GATES, Artifact, GateResult, require_passed, results_for
from faforge.release.package import PackageFacts, read_package
from faforge.release.publish.targets import Target, upload

# What a decision is about: a conda package here, a wheel in faforge.release.publish.wheels. Covariant, so one
# report takes the decisions of either; judge's A is the same, invariant (a parameter's type must be).
P = TypeVar("P", bound=Artifact, covariant=True)
A = TypeVar("A", bound=Artifact)


@dataclass(frozen=True)
class Decision(Generic[P]):
    package: P
    results: dict[str, GateResult]
    allowed: bool
    reason: str
    unverified: bool = False  # refused because required gates have not run or passed: `faforge verify` it first

    def gate_words(self) -> str:
        return ", ".join(f"{g}: {self.results[g].result if g in self.results else 'not run'}" for g in GATES)


def judge(package: A, manifest_dir: Path, required: tuple[str, ...]) -> Decision[A]:
    results = results_for(manifest_dir, package.sha256)
    failed = [g for g in GATES if g in results and results[g].result == "failed"]
    if failed:
        detail = "; ".join(f"{g}: failed ({results[g].detail})" for g in failed)
        return Decision(package, results, False, detail)
    missing = [
        f"{g}: {results[g].result if g in results else 'not run'}"
        for g in required
        if g not in results or results[g].result != "passed"
    ]
    if missing:
        return Decision(package, results, False, "; ".join(missing), unverified=True)
    return Decision(package, results, True, "all required gates passed: " + ", ".join(required))


def channel_kernels(channel: str | Path | None, subdirs: list[str]) -> set[tuple[str, str, str]]:
    """(version, build, subdir) of every kernel package `channel` holds; a channel with no
    repodata yet (nothing published) holds none."""
    if channel is None or (isinstance(channel, Path) and not channel.exists()):
        return set()
    try:
        records = query(channel, [KERNEL_PACKAGE], subdirs)
    except ChannelNotFound:
        return set()
    return {(str(r.version), str(r.build), str(r.subdir)) for r in records}


def require_kernel_packages(
    decisions: list[Decision[PackageFacts]], channel: str | Path | None, channel_name: str
) -> list[Decision[PackageFacts]]:
    """Refuse each allowed flash-attn whose pinned kernel package is neither allowed in this publish
    nor already in the channel, saying which file is missing and how to ship it."""
    pins = {id(d): kernel_pin(d.package.depends) for d in decisions if d.allowed}
    if not any(pins.values()):
        return decisions
    given = {
        (d.package.version, d.package.build, d.package.subdir): d for d in decisions if d.package.name == KERNEL_PACKAGE
    }
    held = channel_kernels(channel, sorted({d.package.subdir for d in decisions}))
    out = []
    for d in decisions:
        pin = pins.get(id(d))
        key = (pin.version, pin.build, d.package.subdir) if pin else None
        if pin is None or (key in given and given[key].allowed) or key in held:
            out.append(d)
            continue
        if key in given:
            why = f"it is in this publish but refused ({given[key].reason}); fix its gates first"
        else:
            why = (
                f"it is neither in this publish nor in {channel_name}; publish {d.package.subdir}/{pin.filename()} "
                "together with this package (its kernel job's artifact, e.g. `faforge publish` both files)"
            )
        out.append(Decision(d.package, d.results, False, f"needs its kernel package {pin} ({pin.filename()}): {why}"))
    return out


@dataclass(frozen=True)
class Outcome:
    package: PackageFacts
    action: str  # published | unchanged | exists | refused | would-publish
    detail: str


@dataclass(frozen=True)
class Published:
    outcomes: list[Outcome]
    channel_problems: list[BadFile] = field(
        default_factory=list
    )  # files already in a folder channel that cannot be indexed


def publish_files(
    files: list[str],
    target: Target,
    *,
    manifest_dir: Path,
    required: tuple[str, ...],
    channel: str | None,
    dry_run: bool,
    force: bool,
) -> tuple[list[Decision[PackageFacts]], Published]:
    """`faforge publish`'s work: judge every file, refuse a flash-attn whose kernel package is neither in
    this publish nor in the channel (`channel`, else a folder target's own), then publish the rest."""
    decisions = [judge(read_package(p), manifest_dir, required) for p in files]
    where = channel or (Path(target.url) if target.kind == "folder" else None)
    decisions = require_kernel_packages(
        decisions, where, str(where) if where else f"the target {target} (pass --channel to read it)"
    )
    return decisions, publish(
        decisions, target, manifest_dir=manifest_dir, required=required, dry_run=dry_run, force=force
    )


def publish(
    decisions: list[Decision[PackageFacts]],
    target: Target,
    *,
    manifest_dir: Path,
    required: tuple[str, ...],
    dry_run: bool,
    force: bool,
) -> Published:
    """Copy or upload the allowed packages. Each is checked against the manifest again here
    (require_passed), whatever the decisions say, before anything is copied, even in a dry run."""
    outcomes = [Outcome(d.package, "refused", d.reason) for d in decisions if not d.allowed]
    allowed = []
    for pkg in (d.package for d in decisions if d.allowed):
        # Refused before anything is copied: an index (ours or a server's) would not list it.
        problem = naming_problem(pkg.filename, pkg.name, pkg.version, pkg.build)
        if problem:
            outcomes.append(Outcome(pkg, "refused", f"cannot be indexed: {problem}"))
        else:
            allowed.append(pkg)
    for pkg in allowed:
        require_passed(manifest_dir, pkg, required)
    if target.kind == "folder":
        result = _publish_to_folder(allowed, Path(target.url), dry_run=dry_run, force=force)
    elif dry_run:
        result = Published([Outcome(p, "would-publish", str(target)) for p in allowed])
    else:
        if allowed:
            upload(target, allowed, manifest_dir=manifest_dir, required=required, force=force)
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
            place_file(pkg.path, channel, pkg.subdir, sha256=pkg.sha256)
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
        return Outcome(
            pkg, "would-publish", f"{where} (the identical file is there but not indexed; indexing it)"
        ), False
    if force:
        return Outcome(pkg, "would-publish", f"{where} (replacing a different file)"), True
    return Outcome(
        pkg, "exists", f"a different file of this name is already in {channel}; pass --force to replace it"
    ), False
