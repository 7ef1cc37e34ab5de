"""What every layer knows about a conda package file: its suffixes and its sha256.

Below both faforge.channel (which indexes and places package files) and faforge.release (which reads
their facts), so neither imports the other for these (the layers, tests/test_layers.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PACKAGE_SUFFIXES = (".conda", ".tar.bz2")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
