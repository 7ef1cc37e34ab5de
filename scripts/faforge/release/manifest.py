"""The verification manifest: every gate's result for one exact package file (by sha256).

Layout: <manifest dir>/<sha256>/<gate>.json. One file per gate means the CPU checks on a
build runner and the GPU gate on a GPU runner write different files, so their folders merge by
plain copying (as actions/download-artifact does) and publish reads the union.
A rebuilt package has a new sha256 and so starts with no results: nothing carries over.
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from faforge import __version__, atomic, untrusted
from faforge.errors import EXIT_PROBLEMS, FaforgeError, shorten
from faforge.packagefile import sha256_of
from faforge.release.package import PackageFacts

MANIFEST_VERSION = 1
GATES = ("abi", "import", "gpu")
RESULTS = ("passed", "failed", "skipped")


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


def check_gate_names(names, *, what: str) -> tuple[str, ...]:
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
        raise FaforgeError(f"{shown}: names no gate, so {purpose}",
                           hint=f"name gates ({', '.join(GATES)}) as a comma list, or leave {source} out for the default")
    if "" in names:
        raise FaforgeError(f"{shown}: an empty name between commas",
                           hint=f"write a plain comma list such as {','.join(GATES)} (an unset variable inside it leaves such a gap)")
    unknown = [n for n in names if n not in GATES]
    if unknown:
        raise FaforgeError(f"{shown}: unknown gate {shorten(repr(unknown[0]))}", hint=f"gates are {', '.join(GATES)}")
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice:
        raise FaforgeError(f"{shown}: names {twice!r} twice", hint="name each gate once")
    return tuple(names)


def require_passed(manifest_dir: Path, package: PackageFacts, required: tuple[str, ...]) -> None:
    """The invariant every copy into a channel checks itself, right before it copies: each required
    gate `passed` for this exact sha256, no gate `failed`, and the file still has that sha256.
    Callers judge first (publish.judge); this stops one that did not (exit 1, nothing copied)."""
    if not required or any(g not in GATES for g in required):
        raise FaforgeError(f"{package.filename}: the required gates {list(required)!r} are not a set of known gates, "
                           "so nothing may be copied", exit_code=EXIT_PROBLEMS, hint=f"require some of {', '.join(GATES)}")
    results = results_for(manifest_dir, package.sha256)
    missing = [f"{g}: {results[g].result if g in results else 'not run'}" for g in GATES
               if (g in required and (g not in results or results[g].result != "passed")) or (g in results and results[g].result == "failed")]
    if missing:
        raise FaforgeError(f"{package.filename} ({package.sha256[:12]}) has not passed its gates ({'; '.join(missing)}), so it is not copied",
                           exit_code=EXIT_PROBLEMS, hint=verify_hint(package, manifest_dir))
    if sha256_of(package.path) != package.sha256:
        raise FaforgeError(f"{package.path}: changed since its gates were checked (sha256 is no longer {package.sha256[:12]}…), so it is not copied",
                           exit_code=EXIT_PROBLEMS, hint="verify and publish the file as it is now")


def verify_hint(package: PackageFacts, manifest_dir: Path) -> str:
    """What to do about a package without its gates: verify it into the manifest publish reads."""
    return f"run `faforge verify {package.path} --manifest {manifest_dir}` first (the GPU gate on a GPU runner: --gates gpu)"


def record(manifest_dir: Path, package: PackageFacts, gate: str, result: str, detail: str) -> GateResult:
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


def results_for(manifest_dir: Path, sha256: str) -> dict[str, GateResult]:
    """gate -> result for this sha256; a file whose content names another sha256 is ignored."""
    out = {}
    folder = manifest_dir / sha256
    for gate in GATES:
        path = folder / f"{gate}.json"
        if not path.is_file():
            continue
        raw = untrusted.load_json(path, "gate result", hint="delete it and run `faforge verify` again")
        if not isinstance(raw, dict):
            raise FaforgeError(f"{path}: unreadable manifest entry (a JSON {type(raw).__name__}, not an object)",
                               hint="delete it and run `faforge verify` again")
        if raw.get("version") != MANIFEST_VERSION or raw.get("sha256") != sha256 or raw.get("gate") != gate:
            continue
        raw.pop("version")
        out[gate] = GateResult(**raw)
    return out
