"""FlashAttention-4 on the channel page (faforge.release.page.PageFamily): one entry per known-good set
(variants/flash-attn-4.yaml), newest release first, each with how far it is proven, its conda package where the
channel holds one (noarch; its build string names the set: torch2.11_cu130_pyh<hash>_0) and its pip, uv and
requirements.txt lines (faforge.families.flash_attn_4.lines).

Its pip lines stand in its own list, not in the page's `pip` list: that list is the grid's pip cells (one glue
wheel per python, torch, CUDA and C++ ABI, each placed on the grid), and a set is none of them. So pip_entries
gives nothing, and the lines' index base is the published one (faforge.pipindex.instructions.index_base).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from packaging.version import Version

from faforge.families.flash_attn_4 import sets
from faforge.families.flash_attn_4.lines import LINE_KEYS, set_lines, torch_cell
from faforge.family import FLASH_ATTN_4
from faforge.matrix import Matrix, load_matrix
from faforge.matrix.releases import ReleaseTable
from faforge.pipindex.instructions import index_base
from faforge.release.package import PackageFacts
from faforge.release.page import install_lines

key = FLASH_ATTN_4.key
conda_packages = (FLASH_ATTN_4.package,)
# The recipe's build string (recipes/flash-attn-4): the set's torch minor and CUDA, then rattler-build's hash.
BUILD = re.compile(r"torch(?P<torch>[0-9]+\.[0-9]+)_cu(?P<cuda>[0-9]{3,4})_pyh[0-9a-f]+_[0-9]+")


def set_of_package(facts: PackageFacts, data: sets.Fa4Data) -> sets.KnownGoodSet | None:
    match = BUILD.fullmatch(facts.build)
    if match is None:
        return None
    cuda = f"{match['cuda'][:-1]}.{match['cuda'][-1]}"
    return next((s for s in data.sets if (s.version, s.torch, s.cuda) == (facts.version, match["torch"], cuda)), None)


def conda_fields(facts: PackageFacts | None, channel: str) -> dict:
    """The set's conda package in the channel, its exact install lines; all empty where the channel has none."""
    if facts is None:
        return {"filename": None, "build": None, "sha256": None, "install": "", "environment_yml": ""}
    return {
        "filename": facts.filename,
        "build": facts.build,
        "sha256": facts.sha256,
        **install_lines(facts, [channel, "conda-forge"]),
    }


def entries(packages: Sequence[PackageFacts], channel: str, table: ReleaseTable) -> list[dict]:
    """Every known-good set, newest release first, then by torch minor (newest first) and CUDA."""
    data = sets.load()
    cells = load_matrix().pip_cells
    newest: dict[tuple[str, str, str], PackageFacts] = {}
    for facts in sorted(packages, key=lambda p: int(p.build.rsplit("_", 1)[-1]) if p.build[-1:].isdigit() else -1):
        if (known := set_of_package(facts, data)) is not None:
            newest[(known.version, known.torch, known.cuda)] = facts
    found = []
    for known in data.sets:
        cell = torch_cell(cells, known)
        found.append(
            {
                "id": known.id,
                "version": known.version,
                "torch_minor": known.torch,
                "cuda": known.cuda,
                "torch": cell.torch if cell else None,
                "python": list(known.python),
                "platforms": list(known.platforms),
                "level": known.level,
                "proofs": [f"{p.level} on {p.platform} (python {p.python}, {p.where}, {p.date})" for p in known.proofs],
                "packages": [f"{name}=={version}" for name, version in known.packages.items()],
                "requires": data.requirements(known),
                **conda_fields(newest.get((known.version, known.torch, known.cuda)), channel),
                **(set_lines(known, cell.torch, index_base()) if cell else dict.fromkeys(LINE_KEYS)),
            }
        )
    found.sort(key=lambda e: (Version(e["version"]), Version(e["torch_minor"]), e["cuda"]), reverse=True)
    return found


def pip_entries(matrix: Matrix, base: str, index: str | None) -> list[dict]:
    """None: its sets' lines are in its own list (see the module docstring)."""
    return []


def summary(found: list[dict]) -> str | None:
    if not found:
        return None
    in_channel = sum(1 for e in found if e["filename"])
    return f"{len(found)} {FLASH_ATTN_4.package} sets ({in_channel} in the channel)"
