"""faforge.atomic: a file written for the user gets the mode the user's umask gives, as any other new file."""

from __future__ import annotations

import os

import pytest

from faforge import atomic


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_the_umask_decides_the_mode(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        atomic.write_text(tmp_path / "out.json", "{}\n")
        (tmp_path / "plain").write_text("x")  # what open() gives under the same umask
    finally:
        os.umask(previous)
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == mode == (tmp_path / "plain").stat().st_mode & 0o777
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "plain"]  # no temporary file left
