"""The pip and uv lines of a known-good set: torch pinned to PyPI's release of the set's minor, FA4 pinned to the
set's wheel (4.0.0b40+cu130.torch2.11), from the index of that torch minor and CUDA added to PyPI.

Why exact pins and no --pre: `==` naming a pre-release admits it in both pip and uv, and the local label makes the
pin name our wheel alone (PyPI refuses uploads with a local label, so it can never hold a file the pin admits).
The set itself is the wheel's Requires-Dist. uv reads an --extra-index-url before PyPI and, by its default
first-index strategy, takes a project from the first index that has it: flash-attn-4 only from ours, every package
of the set (names our index does not serve) only from PyPI.
"""

from __future__ import annotations

import shlex

from faforge.families.flash_attn_4.sets import KnownGoodSet
from faforge.family import FLASH_ATTN_4
from faforge.matrix.cells import PipCell
from faforge.pipindex.instructions import index_url
from faforge.versions import vtuple


def torch_cell(cells: list[PipCell] | tuple[PipCell, ...], known: KnownGoodSet) -> PipCell | None:
    """The linux-64 pip cell of the set's torch minor and CUDA with the newest torch release (the torch its lines
    pin and its import gate installs beside)."""
    found = [c for c in cells if c.platform == "linux-64" and c.torch_minor == known.torch and c.cuda == known.cuda]
    return max(found, key=lambda c: vtuple(c.torch), default=None)


def wheel_version(known: KnownGoodSet) -> str:
    return f"{known.version}+{known.local_label}"


def pins(known: KnownGoodSet, torch: str) -> tuple[str, str]:
    return f"torch=={torch}", f"{FLASH_ATTN_4.package}=={wheel_version(known)}"


def pip_line(index: str, pinned: tuple[str, ...], python: str = "python") -> str:
    return shlex.join([python, "-m", "pip", "install", "--extra-index-url", index, *pinned])


def uv_line(index: str, pinned: tuple[str, ...], python: str | None = None) -> str:
    where = ["--python", python] if python else []
    return shlex.join(["uv", "pip", "install", *where, "--extra-index-url", index, *pinned])


def requirements_txt(index: str, pinned: tuple[str, ...]) -> str:
    return "\n".join([f"--extra-index-url {index}", *pinned]) + "\n"


# What set_lines gives (None each where the matrix has no torch of the set's minor and CUDA).
LINE_KEYS = ("index_name", "index_url", "wheel_version", "pip_install", "uv_install", "requirements_txt")


def set_lines(known: KnownGoodSet, torch: str, base: str) -> dict:
    """The index and the three lines of a set beside PyPI's torch `torch`, from the indexes under `base`."""
    index, pinned = index_url(known.id, base), pins(known, torch)
    return {
        "index_name": known.id,
        "index_url": index,
        "wheel_version": wheel_version(known),
        "pip_install": pip_line(index, pinned),
        "uv_install": uv_line(index, pinned),
        "requirements_txt": requirements_txt(index, pinned),
    }
