"""Decide which packages may be published, then publish exactly those.

A package may go out only if the manifest shows every required gate `passed` for its exact
sha256. `skipped` is not `passed` (a missing GPU never counts as a pass), and a `failed`
gate refuses the package whatever is required, so a known-broken file never ships.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faforge.release.manifest import GATES, GateResult, results_for
from faforge.release.package import PackageFacts, sha256_of
from faforge.release.targets import Target, copy_to_folder, existing_in_folder, reindex_folder, upload


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


def publish(decisions: list[Decision], target: Target, *, dry_run: bool, force: bool) -> list[Outcome]:
    outcomes = []
    allowed = [d for d in decisions if d.allowed]
    outcomes += [Outcome(d.package, "refused", d.reason) for d in decisions if not d.allowed]
    if target.kind == "folder":
        for d in allowed:
            pkg = d.package
            existing = existing_in_folder(target, pkg.subdir, pkg.filename)
            if existing and sha256_of(existing) == pkg.sha256:
                outcomes.append(Outcome(pkg, "unchanged", f"identical file already in {target}"))
            elif existing and not force:
                outcomes.append(Outcome(pkg, "exists", f"a different file of this name is already in {target}; pass --force to replace it"))
            elif dry_run:
                outcomes.append(Outcome(pkg, "would-publish", f"{target}/{pkg.subdir}/{pkg.filename}"))
            else:
                copy_to_folder(target, pkg.path, pkg.subdir)
                outcomes.append(Outcome(pkg, "published", f"{target}/{pkg.subdir}/{pkg.filename}"))
        if any(o.action == "published" for o in outcomes):
            reindex_folder(target)
        return outcomes
    if dry_run:
        return outcomes + [Outcome(d.package, "would-publish", str(target)) for d in allowed]
    if allowed:
        upload(target, [(d.package.path, d.package.subdir) for d in allowed], force=force)
    return outcomes + [Outcome(d.package, "published", str(target)) for d in allowed]
