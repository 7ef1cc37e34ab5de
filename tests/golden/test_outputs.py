"""faforge's outputs are what tests/golden/ holds (tests/golden/capture.py says which and why).

A change that means to change an output reruns `python -m tests.golden.capture` and commits the new files,
so the diff shows every user-visible effect; a refactoring that means to change nothing leaves them alone.
The identity inputs are listed one by one: a move or an edit of a file that enters a build string shows
here by name, before any build string moves."""

from __future__ import annotations

import json

import pytest

from tests.golden.capture import GOLDEN, IDENTITY_INPUTS, capture, identity_inputs

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


def test_the_identity_inputs_are_unchanged():
    held, now = json.loads(IDENTITY_INPUTS.read_text()), identity_inputs()
    moved_or_gone = sorted(set(held) - set(now))
    new = sorted(set(now) - set(held))
    edited = sorted(path for path in set(held) & set(now) if held[path] != now[path])
    assert not (moved_or_gone or new or edited), (
        f"identity inputs gone or moved: {moved_or_gone}; new: {new}; edited (behaviour, not comments): {edited}; "
        f"each moves build strings; {HINT}"
    )
