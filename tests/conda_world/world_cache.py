"""The shared world cache on disk: which worlds stay, and one package cache per world.

Kept out of world.py, whose text is part of the world's key: changing how the cache is kept must not
make a new 4-5 GiB world.
"""

from __future__ import annotations

import fcntl
import shutil
from pathlib import Path

from faforge.channel.local import install
from faforge.release.package_cache import evict
from tests.conda_world.world import World

OURS = ("flash-attn", "libflash-attn-kernels")  # rebuilt every run under the same file names
_IN_USE: list = []  # the lock files of the worlds this process uses, held shared while it lives


def hold(world: World) -> None:
    """Mark `world` as in use by this process: another run's pruning leaves it alone. A lock file of its
    own (.inuse), not the builder's (.lock): a shared hold there made every other session's build_world,
    which takes the builder's lock exclusively even for a finished world, wait until this one ended."""
    lock = open(world.root.with_name(f"{world.root.name}.inuse"), "a")  # held open until exit
    fcntl.flock(lock, fcntl.LOCK_SH)
    _IN_USE.append(lock)


def prune_stale_worlds(parent: Path, key: str) -> list[str]:
    """Remove the worlds of other inputs that no process is using (nobody holds their lock): each is
    4-5 GiB, and every change to world.yaml or the payloads makes a new one, which filled CI's disk."""
    removed = []
    for lock_path in sorted(parent.glob("world-*.lock")):
        name = lock_path.name.removesuffix(".lock")
        if name == f"world-{key}":
            continue
        in_use = lock_path.with_suffix(".inuse")
        with open(lock_path, "a") as building, open(in_use, "a") as using:
            try:
                fcntl.flock(building, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(using, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another run is building or using it
            shutil.rmtree(parent / name, ignore_errors=True)
            lock_path.unlink(missing_ok=True)
            in_use.unlink(missing_ok=True)
        removed.append(name)
    return removed


def install_from_world(world: World, records: dict, prefix: Path) -> None:
    """Install `records` into `prefix` through one package cache per world (its pkgs/), so each torch is
    unpacked once per machine, not once per test (disk and time). Our own packages are rebuilt every run
    under the same file names, so their old extractions are dropped first (rattler would serve them)."""
    for name in OURS:
        if name in records:
            evict(Path(str(records[name].url)).name, {"RATTLER_CACHE_DIR": str(world.root)})
    install(records, prefix, "linux-64", cache_dir=world.root / "pkgs")
