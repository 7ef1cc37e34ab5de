"""The verification manifest: every gate's result for one exact package file (by sha256).

Layout: <manifest dir>/<sha256>/<gate>.json. One file per gate means the CPU checks on a
build runner and the GPU gate on a GPU runner write different files, so their folders merge by
plain copying (as actions/download-artifact does) and publish reads the union.
A rebuilt package has a new sha256 and so starts with no results: nothing carries over.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from faforge import __version__, atomic, untrusted
from faforge.errors import EXIT_PROBLEMS, FaforgeError, shorten
from faforge.packagefile import sha256_of

MANIFEST_VERSION = 1
GATES = ("abi", "import", "gpu")
RESULTS = ("passed", "failed", "skipped")


class Artifact(Protocol):
    """A file gates are recorded for: a conda package (release.package.PackageFacts) or a wheel."""

    @property
    def path(self) -> Path: ...
    @property
    def filename(self) -> str: ...
    @property
    def sha256(self) -> str: ...


class Recorded(Artifact, Protocol):
    """An artifact as its gate record names it: with its matrix cell, when it has one."""

    @property
    def cell_id(self) -> str | None: ...


@dataclass(frozen=True)
class GateResult:
    gate: str
    result: str
    detail: str
    sha256: str
    package: str
    cell: str | None
    recorded_at: str
    host: str
    faforge: str

    def to_json(self) -> dict:
        return {"version": MANIFEST_VERSION, **asdict(self)}


def check_gate_names(names: Iterable[str], *, what: str) -> tuple[str, ...]:
    unknown = [n for n in names if n not in GATES]
    if unknown:
        raise FaforgeError(f"{what}: unknown gate {unknown[0]!r}", hint=f"gates are {', '.join(GATES)}")
    return tuple(names)


def parse_gates(text: str, *, source: str, purpose: str) -> tuple[str, ...]:
    """The one parser of a gate list (--require, $FAFORGE_REQUIRE, --gates): a clean comma list of
    known gates, each once; spaces around a name are allowed. Anything else is refused, naming
    `source`: an empty item (`,,abi`, `abi,`) is what an unset variable leaves in `$A,$B,abi`, so
    it must never shrink the set silently; an empty list would make `purpose` vacuous."""
    shown = f"{source} {shorten(repr(text))}"
    names = [n.strip() for n in text.split(",")]
    if not any(names):
        raise FaforgeError(
            f"{shown}: names no gate, so {purpose}",
            hint=f"name gates ({', '.join(GATES)}) as a comma list, or leave {source} out for the default",
        )
    if "" in names:
        raise FaforgeError(
            f"{shown}: an empty name between commas",
            hint=f"write a plain comma list such as {','.join(GATES)} (an unset variable inside it leaves such a gap)",
        )
    unknown = [n for n in names if n not in GATES]
    if unknown:
        raise FaforgeError(f"{shown}: unknown gate {shorten(repr(unknown[0]))}", hint=f"gates are {', '.join(GATES)}")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice:
        raise FaforgeError(f"{shown}: names {twice!r} twice", hint="name each gate once")
    return tuple(names)


def require_passed(manifest_dir: Path, package: Artifact, required: tuple[str, ...]) -> None:
    """The invariant every copy into a channel checks itself, right before it copies: each required
    gate `passed` for this exact sha256, no gate `failed`, and the file still has that sha256.
    Callers judge first (publish.judge); this stops one that did not (exit 1, nothing copied)."""
    if not required or any(g not in GATES for g in required):
        raise FaforgeError(
            f"{package.filename}: the required gates {list(required)!r} are not a set of known gates, "
            "so nothing may be copied",
            exit_code=EXIT_PROBLEMS,
            hint=f"require some of {', '.join(GATES)}",
        )
    results = results_for(manifest_dir, package.sha256)
    missing = [
        f"{g}: {results[g].result if g in results else 'not run'}"
        for g in GATES
        if (g in required and (g not in results or results[g].result != "passed"))
        or (g in results and results[g].result == "failed")
    ]
    if missing:
        raise FaforgeError(
            f"{package.filename} ({package.sha256[:12]}) has not passed "
            f"its gates ({'; '.join(missing)}), so it is not copied",
            exit_code=EXIT_PROBLEMS,
            hint=verify_hint(package, manifest_dir),
        )
    if sha256_of(package.path) != package.sha256:
        raise FaforgeError(
            f"{package.path}: changed since its gates were checked (sha256 "
            f"is no longer {package.sha256[:12]}…), so it is not copied",
            exit_code=EXIT_PROBLEMS,
            hint="verify and publish the file as it is now",
        )


def verify_hint(package: Artifact, manifest_dir: Path) -> str:
    """What to do about a package without its gates: verify it into the manifest publish reads."""
    return (
        f"run `faforge verify {package.path} --manifest {manifest_dir}` "
        "first (the GPU gate on a GPU runner: --gates gpu)"
    )


def record(manifest_dir: Path, package: Recorded, gate: str, result: str, detail: str) -> GateResult:
    """Write (or replace) one gate's result for this package file."""
    check_gate_names([gate], what="record")
    if result not in RESULTS:
        raise ValueError(f"result {result!r} is not one of {RESULTS}")
    entry = GateResult(
        gate=gate,
        result=result,
        detail=detail,
        sha256=package.sha256,
        package=package.filename,
        cell=package.cell_id,
        recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        host=f"{platform.node()} ({platform.machine()})",
        faforge=__version__,
    )
    folder = manifest_dir / package.sha256
    folder.mkdir(parents=True, exist_ok=True)
    atomic.write_text(folder / f"{gate}.json", json.dumps(entry.to_json(), indent=2) + "\n")
    return entry


# Every key of a gate record and the JSON type its value must have (a record names its package and file, so
# `cell` is null for a package of no matrix cell).
FIELDS = {
    "version": (int,),
    "gate": (str,),
    "result": (str,),
    "detail": (str,),
    "sha256": (str,),
    "package": (str,),
    "cell": (str, type(None)),
    "recorded_at": (str,),
    "host": (str,),
    "faforge": (str,),
}
REDO = "delete it and run `faforge verify` again (gate records are written by `faforge verify` only)"


def _bad(path: Path, what: str) -> FaforgeError:
    return FaforgeError(f"{path}: {what}", hint=REDO, input=str(path))


def read_record(path: Path, sha256: str, gate: str) -> GateResult:
    """One gate record, read as a data file (faforge.untrusted: a regular file within its cap, strict JSON)
    and checked key by key: exactly FIELDS, each of its type, this version, this gate, this sha256 and a
    known result. Anything else is exit 2 naming the file: a record that is there but not readable is
    never taken for "not run"."""
    raw = untrusted.load_json(path, "gate result", hint=REDO)
    if not isinstance(raw, dict):
        raise _bad(path, f"a gate record is a JSON object, not a {type(raw).__name__}")
    unknown = sorted(set(raw) - set(FIELDS))
    missing = [k for k in FIELDS if k not in raw]
    if unknown or missing:
        raise _bad(path, f"unknown key {shorten(repr(unknown[0]))}" if unknown else f"no {missing[0]!r} key")
    for key, types in FIELDS.items():
        if not isinstance(raw[key], types) or isinstance(raw[key], bool):
            wanted = " or ".join("null" if t is type(None) else {int: "an integer", str: "a string"}[t] for t in types)
            raise _bad(path, f"{key!r} is {shorten(json.dumps(raw[key]), 80)}, not {wanted}")
    expected = {"version": MANIFEST_VERSION, "gate": gate, "sha256": sha256}
    wrong = next((k for k, v in expected.items() if raw[k] != v), None)
    if wrong:
        raise _bad(
            path,
            f"{wrong!r} is {shorten(json.dumps(raw[wrong]), 80)}, but a "
            f"record at this path must say {json.dumps(expected[wrong])}",
        )
    if raw["result"] not in RESULTS:
        raise _bad(path, f"'result' is {shorten(json.dumps(raw['result']), 80)}, not one of {', '.join(RESULTS)}")
    return GateResult(**{k: v for k, v in raw.items() if k != "version"})


def results_for(manifest_dir: Path, sha256: str) -> dict[str, GateResult]:
    """gate -> result for this sha256: the records of <manifest dir>/<sha256>/ (read_record); a gate whose
    file is absent has not run. A record path that exists as anything but a readable record is exit 2."""
    out = {}
    folder = manifest_dir / sha256
    if os.path.lexists(folder) and not folder.is_dir():
        raise _bad(folder, "is not a folder of gate records (a file, link or device is there)")
    for gate in GATES:
        path = folder / f"{gate}.json"
        if os.path.lexists(path):
            out[gate] = read_record(path, sha256, gate)
    return out
