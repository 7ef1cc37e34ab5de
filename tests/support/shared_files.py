"""The test cache's two installs of one PyPI torch share their files.

tests/support/torch_envs.py's venv of torch==X for Python Y (the tests' own) and faforge's clean_env venv of the
same torch (made by `faforge verify` and `faforge build` under the tests' FAFORGE_CACHE_DIR) hold the same wheels'
files, 5.4 GB for torch 2.14.1 with its CUDA libraries. At the end of a run each large file of the second that is
byte for byte the file of the same path in the first becomes a hardlink to it, as the pip world's venv copies
already are. Neither install changes a file in place (pip replaces files), so sharing changes no test's inputs.
"""

from __future__ import annotations

import filecmp
import os
import re
import stat
from pathlib import Path

from tests.support.cache import cache_dir

SMALLEST_SHARED = 1 << 20  # smaller files are most of the count and little of the bytes
CLEAN_ENV_VENV = re.compile(
    r"^torch-(?P<torch>[^-+]+)-py(?P<python>\d+\.\d+)\+"
)  # clean_env's name: torch-2.14.1-py3.11+einops+pytest


def share_identical_files(first: Path, second: Path, smallest: int = SMALLEST_SHARED) -> int:
    """Hardlink each regular file of at least `smallest` bytes under `second` to the file of the same relative path
    under `first` when both hold the same bytes; the bytes freed."""
    freed = 0
    for path in second.rglob("*"):
        twin = first / path.relative_to(second)
        try:
            ours, theirs = path.lstat(), twin.lstat()
        except OSError:
            continue
        if not (stat.S_ISREG(ours.st_mode) and stat.S_ISREG(theirs.st_mode)) or ours.st_ino == theirs.st_ino:
            continue
        if ours.st_size < smallest or ours.st_size != theirs.st_size or ours.st_mode != theirs.st_mode:
            continue
        if not filecmp.cmp(path, twin, shallow=False):
            continue
        staged = path.with_name(f".{path.name}.shared")
        os.link(twin, staged)
        os.replace(staged, path)
        freed += ours.st_size
    return freed


def share_torch_venvs() -> list[tuple[str, int]]:
    """(clean_env venv, bytes freed) for every clean_env torch venv whose torch and Python a tests' venv has too."""
    shared = []
    for venv in sorted((cache_dir("faforge") / "torch-venvs").glob("torch-*")):
        match = CLEAN_ENV_VENV.match(venv.name)
        twin = cache_dir("venvs") / f"torch-{match['torch']}-py{match['python']}" if match else None
        if twin is None or not (twin / ".faforge-complete").is_file() or not (venv / ".faforge-complete").is_file():
            continue
        site = f"lib/python{match['python']}/site-packages"
        if (twin / site).is_dir() and (venv / site).is_dir():
            shared.append((venv.name, share_identical_files(twin / site, venv / site)))
    return shared
