"""Decide which wheels may be published into the pip wheel index, then publish exactly those.

The same rule as for conda packages (faforge.release.publish.channel): every required gate `passed` for the
wheel's exact sha256 in the verification manifest, no gate `failed`, and the file still that sha256
when it is copied (release.manifest.require_passed, checked again right before the copy, in a dry run
too). Then what the index itself needs (faforge.pipindex.placement): a wheel of one of its projects,
with a Requires-Python for its links; a flash-attn glue wheel only with the exact kernel wheel it pins,
allowed in the same publish or already in the index's files/; a torch-range wheel only where an index of
its CUDA and torch range exists.
"""

from __future__ import annotations

from pathlib import Path

from faforge.pipindex.folder import survey
from faforge.pipindex.placement import GLUE, KERNEL, PROJECTS, TORCH_RANGE, admits, glue_index, place
from faforge.pipindex.publish import IndexPublished, Outcome, publish_wheels
from faforge.pipwheel.facts import WheelFacts, identity, read_wheel, requirement
from faforge.pipwheel.record import check_record
from faforge.release.manifest import require_passed
from faforge.release.publish.channel import Decision, judge


def publish_wheel_files(
    files: list[str], root: Path, *, manifest_dir: Path, required: tuple[str, ...], dry_run: bool, force: bool
) -> tuple[list[Decision[WheelFacts]], IndexPublished]:
    """`faforge publish W.whl ... --index ROOT`'s work: read every wheel (its RECORD checked), judge it, refuse
    two different files of one wheel and what the index cannot list, then publish the rest."""
    wheels = []
    for path in files:
        wheel = read_wheel(path)
        check_record(wheel)
        wheels.append(wheel)
    decisions = one_file_per_wheel([judge(w, manifest_dir, required) for w in _distinct(wheels)])
    held = list(survey(root).wheels.values()) if root.is_dir() else []
    decisions = admit(decisions, held, root)
    allowed = [d.package for d in decisions if d.allowed]
    for wheel in allowed:
        require_passed(manifest_dir, wheel, required)
    result = publish_wheels(allowed, root, dry_run=dry_run, force=force)
    refused = [Outcome(d.package, "refused", d.reason) for d in decisions if not d.allowed]
    order = {d.package.path: i for i, d in enumerate(decisions)}
    return decisions, IndexPublished(
        sorted(refused + result.outcomes, key=lambda o: order[o.wheel.path]), result.problems
    )


def _distinct(wheels: list[WheelFacts]) -> list[WheelFacts]:
    """Each file once: a path given twice, or two copies of one file (one wheel, one sha256), is published once."""
    seen: dict[tuple, WheelFacts] = {}
    for wheel in wheels:
        seen.setdefault((identity(wheel), wheel.sha256), wheel)
    return list(seen.values())


def one_file_per_wheel(decisions: list[Decision[WheelFacts]]) -> list[Decision[WheelFacts]]:
    """Refuse every wheel of which this publish gives two different files (one name, or names pip takes for
    one: faforge.pipwheel.facts.identity): the index would hold whichever was copied last, and the report
    would name a sha256 the index does not hold."""
    by_wheel: dict[tuple, list[Decision[WheelFacts]]] = {}
    for d in decisions:
        by_wheel.setdefault(identity(d.package), []).append(d)
    out = []
    for d in decisions:
        others = [o.package for o in by_wheel[identity(d.package)] if o is not d]
        if others:
            shown = ", ".join(f"{o.path} (sha256 {o.sha256[:12]}…)" for o in others)
            d = Decision(
                d.package,
                d.results,
                False,
                f"this publish also gives {shown}, another file of this wheel; publish one of them",
            )
        out.append(d)
    return out


def admit(decisions: list[Decision[WheelFacts]], held: list[WheelFacts], root: Path) -> list[Decision[WheelFacts]]:
    """Refuse each allowed wheel the index could not list or install (see the module's docstring)."""
    out = {id(d): d for d in decisions}

    def refuse(d: Decision[WheelFacts], why: str) -> None:
        out[id(d)] = Decision(d.package, d.results, False, why)

    for d in (d for d in decisions if d.allowed):
        wheel = d.package
        if wheel.name not in PROJECTS:
            refuse(
                d,
                f"cannot be indexed: {wheel.name} is none of the projects "
                f"this index serves ({', '.join(sorted(PROJECTS))})",
            )
        elif not wheel.requires_python:
            refuse(
                d,
                "cannot be indexed: it has no Requires-Python, which "
                "every link of the index carries (data-requires-python)",
            )
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
    glues = [out[id(d)].package for d in decisions if out[id(d)].allowed and d.package.name == GLUE] + [
        w for w in held if w.name == GLUE
    ]
    for d in (d for d in decisions if out[id(d)].allowed and d.package.name in TORCH_RANGE):
        placed = place([*glues, d.package])
        if not placed.indexes_of(d.package.filename):
            refuse(
                d, f"cannot be indexed: {next(why for w, why in placed.problems if w.filename == d.package.filename)}"
            )
    return [out[id(d)] for d in decisions]


def _kernel_problem(
    wheel: WheelFacts, given: dict[str, Decision[WheelFacts]], held: list[WheelFacts], root: Path
) -> str | None:
    pin = requirement(wheel, KERNEL)
    if pin is None or not any(s.operator in ("==", "===") for s in pin.specifier):
        return (
            f"cannot be indexed: it pins no exact {KERNEL} wheel (Requires-Dist "
            f"{KERNEL}==VERSION), so it could load another kernel build"
        )
    kernels = [d for d in given.values() if d.package.name == KERNEL and admits(pin, d.package.version)]
    if any(d.allowed for d in kernels) or any(w.name == KERNEL and admits(pin, w.version) for w in held):
        return None
    if kernels:
        return (
            f"needs its kernel wheel {pin}: {kernels[0].package.filename} is in "
            f"this publish but refused ({kernels[0].reason}); fix its gates first"
        )
    return (
        f"needs its kernel wheel {pin}: it is neither in this publish "
        f"nor in {root}; publish that wheel (its kernel job's "
        "artifact) together with this one"
    )
