"""Gate records (verification/SHA256/GATE.json) are data files: a record that is there but is not one
(a wrong or missing key, a value of the wrong type, another gate's or file's record, a FIFO, a device, a
folder) stops publish with exit 2 and one line naming the file, on the conda side (--to) and the pip side
(--index) alike: never a traceback, never read as "not run"."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from faforge.errors import FaforgeError
from faforge.release.manifest import results_for
from tests.release.test_publish import faforge, package, passed
from tests.support import tiny_wheels as tw

GOOD = {
    "version": 1,
    "gate": "abi",
    "result": "passed",
    "detail": "test",
    "sha256": "",
    "package": "x",
    "cell": None,
    "recorded_at": "2026-12-07T00:00:00+00:00",
    "host": "h (x86_64)",
    "faforge": "0.1.0",
}
# kind -> what replaces the record (a dict: its JSON; a str: a kind of file)
HOSTILE = {
    "unknown-key": {"extra": 1},
    "missing-key": {"detail": None},
    "result-int": {"result": 5},
    "cell-list": {"cell": ["a"]},
    "version-bool": {"version": True},
    "version-2": {"version": 2},
    "other-gate": {"gate": "gpu"},
    "other-sha256": {"sha256": "b" * 64},
    "result-unknown": {"result": "maybe"},
    "array": "array",
    "fifo": "fifo",
    "device": "device",
    "folder": "folder",
    "dangling-link": "dangling-link",
}


def make_record(path: Path, sha256: str, kind: str) -> None:
    """The abi record of `sha256` at `path`, hostile in the way `kind` names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    change = HOSTILE[kind]
    if change == "fifo":
        os.mkfifo(path)
    elif change == "device":
        path.symlink_to("/dev/null")
    elif change == "folder":
        path.mkdir()
    elif change == "dangling-link":
        path.symlink_to(path.parent / "nowhere.json")
    elif change == "array":
        path.write_text("[]\n")
    else:
        record = {**GOOD, "sha256": sha256, **change}
        path.write_text(json.dumps({k: v for k, v in record.items() if v is not None or k == "cell"}))


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_gate_record_that_is_not_one_is_refused_naming_it(tmp_path, kind):
    sha256 = "a" * 64
    entry = tmp_path / sha256 / "abi.json"
    make_record(entry, sha256, kind)
    with pytest.raises(FaforgeError) as caught:
        results_for(tmp_path, sha256)
    assert caught.value.exit_code == 2 and str(entry) in caught.value.line() and " — " in caught.value.line()


def test_a_true_record_reads(tmp_path):
    sha256 = "a" * 64
    (tmp_path / sha256).mkdir()
    (tmp_path / sha256 / "abi.json").write_text(json.dumps({**GOOD, "sha256": sha256}))
    assert results_for(tmp_path, sha256)["abi"].result == "passed"
    assert results_for(tmp_path, "c" * 64) == {}  # no folder: nothing has run


@pytest.mark.parametrize("side", ["conda", "pip"])
@pytest.mark.parametrize("kind", ["unknown-key", "missing-key", "result-int", "fifo", "device"])
def test_publish_stops_on_a_hostile_record_with_one_line(tmp_path, side, kind):
    manifest = tmp_path / "verification"
    if side == "conda":
        path = package(tmp_path / "pkg")
        passed(manifest, path)
        target = ["--to", str(tmp_path / "channel")]
    else:
        path = tw.build_wheel(tw.kernel(), tmp_path / "wheels")
        tw.record_gates(manifest, path)
        target = ["--index", str(tmp_path / "index")]
    sha256 = next(p.name for p in manifest.iterdir())
    entry = manifest / sha256 / "abi.json"
    make_record(entry, sha256, kind)
    result = faforge("publish", str(path), "--manifest", str(manifest), *target)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
    assert str(entry) in result.stderr and "not run" not in result.stdout + result.stderr, result.stderr
    assert not (tmp_path / "channel").exists() and not (tmp_path / "index" / "files").exists()
