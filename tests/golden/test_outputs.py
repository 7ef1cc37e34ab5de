"""faforge's outputs are what tests/golden/ holds (tests/golden/capture.py says which and why).

A change that means to change an output reruns `python -m tests.golden.capture` and commits the new files,
so the diff shows every user-visible effect; a refactoring that means to change nothing leaves them alone.
The identity inputs are listed one by one, by logical name: each is unchanged, moved (a move alone changes no
build string), edited, new or removed against identity-inputs.json, and every change but "unchanged" must be
listed, with why, in identity-changes.yaml."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.golden.capture import GOLDEN, IDENTITY_CHANGES, IDENTITY_INPUTS, capture, identity_inputs

HINT = "if the change is meant, run `python -m tests.golden.capture` and commit tests/golden/"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return capture(tmp_path_factory.mktemp("golden"))


def test_the_same_outputs_are_made(outputs):
    held = sorted(p.name for p in GOLDEN.iterdir())
    assert sorted(outputs) == held, HINT


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir()))
def test_each_output_is_byte_for_byte_the_same(outputs, name):
    assert outputs.get(name) == (GOLDEN / name).read_text(), f"{name} changed; {HINT}"


def statuses(held: dict, now: dict) -> dict[str, dict[str, str]]:
    """{identity input: {status, from, to}}: unchanged, moved (same canonical content, another path), edited
    (another canonical content; from/to where it moved too), new or removed, by logical name."""
    out = {}
    for key in sorted(set(held) | set(now)):
        before, after = held.get(key), now.get(key)
        if before is None or after is None:
            out[key] = (
                {"status": "new", "to": after["path"]} if after else {"status": "removed", "from": before["path"]}
            )
            continue
        where = {"from": before["path"], "to": after["path"]} if before["path"] != after["path"] else {}
        status = "edited" if before["sha256"] != after["sha256"] else "moved" if where else "unchanged"
        out[key] = {"status": status, **where}
    return out


def test_a_move_is_told_from_an_edit():
    held = {n: {"path": f"old/{n}", "sha256": n} for n in ("same", "moved", "edited", "both", "gone")}
    now = {
        "same": {"path": "old/same", "sha256": "same"},
        "moved": {"path": "new/moved", "sha256": "moved"},
        "edited": {"path": "old/edited", "sha256": "other"},
        "both": {"path": "new/both", "sha256": "other"},
        "added": {"path": "new/added", "sha256": "added"},
    }
    assert statuses(held, now) == {
        "same": {"status": "unchanged"},
        "moved": {"status": "moved", "from": "old/moved", "to": "new/moved"},
        "edited": {"status": "edited"},
        "both": {"status": "edited", "from": "old/both", "to": "new/both"},
        "gone": {"status": "removed", "from": "old/gone"},
        "added": {"status": "new", "to": "new/added"},
    }


def test_the_identity_inputs_are_unchanged():
    """Every identity input is unchanged, or listed in identity-changes.yaml with what happened to it and why."""
    seen = statuses(json.loads(IDENTITY_INPUTS.read_text()), identity_inputs())
    listed = yaml.safe_load(IDENTITY_CHANGES.read_text()) or {}
    print("\n".join(f"{s['status']:9} {key}" for key, s in seen.items()))  # the list, with -s
    changed = {key: s for key, s in seen.items() if s["status"] != "unchanged"}
    wrong = {
        key: {"seen": s, "listed": listed.get(key)}
        for key, s in changed.items()
        if {k: v for k, v in (listed.get(key) or {}).items() if k != "why"} != s
    }
    stale = sorted(set(listed) - set(changed))
    unjustified = sorted(key for key, entry in listed.items() if not str((entry or {}).get("why") or "").strip())
    assert not (wrong or stale or unjustified), (
        f"identity inputs changed but not listed as seen in {IDENTITY_CHANGES.name}: {wrong}; listed there but "
        f"unchanged: {stale}; listed without a why: {unjustified}. Each edit moves build strings (a move alone "
        f"does not): list it with why, or, after a release, {HINT}"
    )
