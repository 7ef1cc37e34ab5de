"""rattler's package cache must never serve an old extraction of a package a build is about to make.

rattler keeps each extracted package under its name-version-build: `pkgs/<name>-<version>-<build>/` in
$RATTLER_CACHE_DIR, else $XDG_CACHE_HOME/rattler/cache (~/.cache/rattler/cache). Our build strings
follow every input once `faforge generate` has written its digests into the variant files
(faforge.matrix.inputs), but a local edit before that, or a rebuild of the same inputs, makes a package
under a name rattler has seen, and rattler-build's test environment installed the *old* extraction and
ran the old package's tests.
Seen: the conda world's kernel package ran `python -m faforge.abi.torchfree`, a module the rebuilt
recipe no longer ships. `faforge build` drops the extraction first, so a recipe's tests always run what
was just built.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

PACKAGE_SUFFIX = ".conda"


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """rattler's cache folder, as rattler_cache::default_cache_dir finds it."""
    if environ.get("RATTLER_CACHE_DIR"):
        return Path(environ["RATTLER_CACHE_DIR"])
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rattler" / "cache"


def evict(filename: str, environ: Mapping[str, str] = os.environ) -> list[Path]:
    """Remove the cached extraction (and its lock file) of the package `filename`; what was removed."""
    stem = filename.removesuffix(PACKAGE_SUFFIX)
    if not stem or "/" in stem or stem.startswith("."):
        raise ValueError(f"not a package file name: {filename!r}")
    removed = []
    for path in (cache_root(environ) / "pkgs" / stem, cache_root(environ) / "pkgs" / f"{stem}.lock"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(path)
    return removed
