"""Decide which wheels may be published into the pip wheel index, then publish exactly those.

The same rule as for conda packages (faforge.release.publish): every required gate `passed` for the
wheel's exact sha256 in the verification manifest, no gate `failed`, and the file still that sha256
when it is copied (release.manifest.require_passed, checked again right before the copy, in a dry run
too). Then what the index itself needs (faforge.pipindex.placement): a wheel of one of its projects,
with a Requires-Python for its links; a flash-attn glue wheel only with the exact kernel wheel it pins,
allowed in the same publish or already in the index's files/; a FlashAttention-3 wheel only where an
index of its CUDA and torch range exists.
"""

from __future__ import annotations

from pathlib import Path

from faforge.pipindex.folder import survey
from faforge.pipindex.placement import FA3, GLUE, KERNEL, PROJECTS, admits, glue_index, place
from faforge.pipindex.publish import IndexPublished, Outcome, publish_wheels
from faforge.pipwheel.facts import read_wheel, requirement
from faforge.release.manifest import require_passed
from faforge.release.publish import Decision, judge


def publish_wheel_files(files: list[str], root: Path, *, manifest_dir: Path, required: tuple[str, ...], dry_run: bool,
                        force: bool) -> tuple[list[Decision], IndexPublished]:
    """`faforge publish W.whl ... --index ROOT`'s work: judge every wheel, refuse what the index cannot
    list, then publish the rest."""
    decisions = [judge(read_wheel(p), manifest_dir, required) for p in files]
    held = list(survey(root).wheels.values()) if root.is_dir() else []
    decisions = admit(decisions, held, root)
    allowed = [d.package for d in decisions if d.allowed]
    for wheel in allowed:
        require_passed(manifest_dir, wheel, required)
    result = publish_wheels(allowed, root, dry_run=dry_run, force=force)
    refused = [Outcome(d.package, "refused", d.reason) for d in decisions if not d.allowed]
    order = {d.package.path: i for i, d in enumerate(decisions)}
    return decisions, IndexPublished(sorted(refused + result.outcomes, key=lambda o: order[o.wheel.path]), result.problems)


def admit(decisions: list[Decision], held: list, root: Path) -> list[Decision]:
    """Refuse each allowed wheel the index could not list or install (see the module's docstring)."""
    out = {id(d): d for d in decisions}

    def refuse(d: Decision, why: str) -> None:
        out[id(d)] = Decision(d.package, d.results, False, why)

    for d in (d for d in decisions if d.allowed):
        wheel = d.package
        if wheel.name not in PROJECTS:
            refuse(d, f"cannot be indexed: {wheel.name} is none of the projects this index serves ({', '.join(sorted(PROJECTS))})")
        elif not wheel.requires_python:
            refuse(d, "cannot be indexed: it has no Requires-Python, which every link of the index carries (data-requires-python)")
    # A glue's kernel wheel as judged so far: one refused above (its gates, its Requires-Python) takes the glue with it.
    given = {d.package.filename: out[id(d)] for d in decisions}
    for d in (d for d in decisions if out[id(d)].allowed and d.package.name == GLUE):
        index, why = glue_index(d.package)
        if index is None:
            refuse(d, f"cannot be indexed: {why}")
            continue
        problem = _kernel_problem(d.package, given, held, root)
        if problem:
            refuse(d, problem)
    glues = [out[id(d)].package for d in decisions if out[id(d)].allowed and d.package.name == GLUE] + [w for w in held if w.name == GLUE]
    for d in (d for d in decisions if out[id(d)].allowed and d.package.name == FA3):
        placed = place([*glues, d.package])
        if not placed.indexes_of(d.package.filename):
            refuse(d, f"cannot be indexed: {next(why for w, why in placed.problems if w.filename == d.package.filename)}")
    return [out[id(d)] for d in decisions]


def _kernel_problem(wheel, given: dict[str, Decision], held: list, root: Path) -> str | None:
    pin = requirement(wheel, KERNEL)
    if pin is None or not any(s.operator in ("==", "===") for s in pin.specifier):
        return f"cannot be indexed: it pins no exact {KERNEL} wheel (Requires-Dist {KERNEL}==VERSION), so it could load another kernel build"
    kernels = [d for d in given.values() if d.package.name == KERNEL and admits(pin, d.package.version)]
    if any(d.allowed for d in kernels) or any(w.name == KERNEL and admits(pin, w.version) for w in held):
        return None
    if kernels:
        return f"needs its kernel wheel {pin}: {kernels[0].package.filename} is in this publish but refused ({kernels[0].reason}); fix its gates first"
    return (f"needs its kernel wheel {pin}: it is neither in this publish nor in {root}; publish that wheel (its kernel job's "
            "artifact) together with this one")
