"""Where the repository's data lives, found from the installed package or the cwd."""

from __future__ import annotations

import os
from pathlib import Path

from faforge.errors import FaforgeError

MARKER = Path("variants") / "releases.yaml"


def repo_root() -> Path:
    """The checkout holding variants/ and recipes/ (editable installs and CI run from it)."""
    candidates = []
    if os.environ.get("FAFORGE_ROOT"):
        candidates.append(Path(os.environ["FAFORGE_ROOT"]))
    candidates += list(Path(__file__).resolve().parents)
    candidates += [Path.cwd(), *Path.cwd().parents]
    for candidate in candidates:
        if (candidate / MARKER).is_file():
            return candidate
    raise FaforgeError(
        f"cannot find {MARKER} above {Path(__file__).parent} or the current directory",
        hint="run faforge from the repository checkout, install it with `pip install -e .`, or set FAFORGE_ROOT",
    )


def variants_dir() -> Path:
    return repo_root() / "variants"


def recipe_dir() -> Path:
    return repo_root() / "recipes" / "flash-attn"
