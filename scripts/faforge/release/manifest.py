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
from faforge.errors import FaforgeError
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
