"""The world cache keeps one world per inputs; worlds of other inputs are removed once nobody uses them.

CI's disk filled (No space left on device while unpacking libtorch) after worlds of earlier inputs, 4-5
GiB each, piled up in the shared test cache.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys

from tests.conda_world.world import World
from tests.conda_world.world_cache import hold, prune_stale_worlds


def _world(parent, key):
    (parent / f"world-{key}" / "conda-forge").mkdir(parents=True)
    (parent / f"world-{key}" / ".complete").write_text("{}")
    (parent / f"world-{key}.lock").touch()


def test_stale_worlds_go_and_the_current_and_busy_ones_stay(tmp_path):
    for key in ("current", "old", "busy"):
        _world(tmp_path, key)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_SH); "
            "print('held', flush=True); sys.stdin.read()",
            str(tmp_path / "world-busy.inuse"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert prune_stale_worlds(tmp_path, "current") == ["world-old"]
    finally:
        holder.communicate("")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "world-busy",
        "world-busy.inuse",
        "world-busy.lock",
        "world-current",
        "world-current.lock",
    ]
    with open(tmp_path / "world-current.lock") as lock:  # the pruner leaves no lock behind
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert prune_stale_worlds(tmp_path, "current") == ["world-busy"]


def test_a_session_using_a_world_does_not_make_another_wait_for_it(tmp_path):
    """Another session's hold is on .inuse; build_world's exclusive lock on .lock is still free at once."""
    _world(tmp_path, "shared")
    hold(World(tmp_path / "world-shared", {}, 0.0, 0))
    holder = subprocess.run(
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)",
            str(tmp_path / "world-shared.lock"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert holder.returncode == 0, holder.stderr
