"""Which indexes take a wheel: data in the wheels themselves, never a table beside them.

- a flash-attn glue wheel: the index its local label names (2.8.3.post2+torch2.11.cu130.abi1 ->
  torch2.11-cu130), whose torch minor its own torch requirement, if any, must admit;
- a kernel wheel (libflash-attn-kernels): every index of a glue wheel that pins its exact version,
  so it is published along with them; pinned by none yet, it waits in files/ (no problem);
- a torch-range wheel (one binary for every torch from a floor on, built against torch's stable ABI): every
  index of its CUDA (local label cu130...) whose torch minor its torch requirement (torch>=2.9) admits,
  among the indexes the glue wheels make.

The function is pure: the same wheels give the same placement, whatever order they come in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from faforge.family import FLASH_ATTN, families
from faforge.pipindex.layout import index_name, parse_index_name
from faforge.pipwheel.facts import WheelFacts, requirement
from faforge.wheelnames import CUDA_LABEL, GLUE_LABEL

GLUE = canonicalize_name(FLASH_ATTN.package)
KERNEL = canonicalize_name(FLASH_ATTN.kernel_package)
# Each project of the families' wheels by its placement rule (faforge.family: wheel_projects), in the order pages
# are written in: what a glue wheel needs (its kernel, a torch-range wheel beside it) is there first.
RULES = ("kernel", "torch-range", "glue")
_PROJECTS = sorted(
    ((canonicalize_name(project), rule) for family in families() for project, rule in family.wheel_projects),
    key=lambda pair: RULES.index(pair[1]),
)
PROJECTS = tuple(project for project, _ in _PROJECTS)
TORCH_RANGE = frozenset(project for project, rule in _PROJECTS if rule == "torch-range")


@dataclass(frozen=True)
class Placement:
    indexes: dict[str, tuple[WheelFacts, ...]]  # index name -> its wheels, sorted by file name
    # (wheel, why) in files/ but in no index, rightly so (a kernel no glue pins yet)
    waiting: tuple[tuple[WheelFacts, str], ...]
    # (wheel, why) no index can take: not ours, or its own data contradicts itself
    problems: tuple[tuple[WheelFacts, str], ...]

    def indexes_of(self, filename: str) -> tuple[str, ...]:
        return tuple(name for name, wheels in self.indexes.items() if any(w.filename == filename for w in wheels))


def admits(req: Requirement | None, version: str) -> bool:
    """Whether `req` (None: no requirement) allows `version`, pre-releases and local labels included."""
    if req is None:
        return True
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def glue_index(wheel: WheelFacts) -> tuple[str, None] | tuple[None, str]:
    """(index name, None) for a glue wheel, or (None, why not)."""
    match = GLUE_LABEL.fullmatch(wheel.local or "")
    if not match:
        return None, (
            f"its local version label {wheel.local!r} names no torch minor, CUDA and ABI (e.g. +torch2.11.cu130.abi1), "
            "so no index takes it"
        )
    minor = match["torch"]
    torch = requirement(wheel, "torch")
    if not admits(torch, minor):
        return None, (
            f"its label names torch {minor}, but it requires {torch}: the index of torch {minor} could never install it"
        )
    return index_name(minor, match["cuda"]), None


def place(wheels: Iterable[WheelFacts]) -> Placement:
    """Each wheel's indexes (see the module's docstring)."""
    wheels = sorted(wheels, key=lambda w: w.filename)
    indexes: dict[str, list[WheelFacts]] = {}
    waiting: list[tuple[WheelFacts, str]] = []
    problems: list[tuple[WheelFacts, str]] = []
    for wheel in (w for w in wheels if w.name == GLUE):
        placed = glue_index(wheel)
        if placed[0] is not None:
            indexes.setdefault(placed[0], []).append(wheel)
        else:
            problems.append((wheel, placed[1]))
    glue_placed = {name: list(ws) for name, ws in indexes.items()}
    # (torch minor, CUDA) of each: every name here is one glue_index made, so each parses
    glue_indexes = {name: parts for name in glue_placed if (parts := parse_index_name(name)) is not None}
    for wheel in (w for w in wheels if w.name == KERNEL):
        pinned_by = sorted(name for name, ws in glue_placed.items() if any(_pins(g, wheel) for g in ws))
        for name in pinned_by:
            indexes[name].append(wheel)
        if not pinned_by:
            waiting.append(
                (wheel, f"no {FLASH_ATTN.package} wheel in the index pins it yet; it joins their indexes when one does")
            )
    for wheel in (w for w in wheels if w.name in TORCH_RANGE):
        fits, why = torch_range_indexes(wheel, glue_indexes)
        for name in fits:
            indexes[name].append(wheel)
        if why is not None:
            problems.append((wheel, why))
    for wheel in (w for w in wheels if w.name not in PROJECTS):
        problems.append(
            (wheel, f"{wheel.name} is none of the projects this index serves ({', '.join(sorted(PROJECTS))})")
        )
    return Placement(
        {n: tuple(sorted(ws, key=lambda w: w.filename)) for n, ws in sorted(indexes.items())},
        tuple(waiting),
        tuple(sorted(problems, key=lambda p: p[0].filename)),
    )


def torch_range_indexes(wheel: WheelFacts, glue_indexes: dict[str, tuple[str, str]]) -> tuple[list[str], str | None]:
    """(the indexes of `glue_indexes`, name -> (torch minor, CUDA), that take a torch-range wheel, why none)."""
    match = CUDA_LABEL.fullmatch(wheel.local or "")
    if not match:
        return [], f"its local version label {wheel.local!r} names no CUDA (e.g. +cu130.sm80.90a), so no index takes it"
    torch = requirement(wheel, "torch")
    fits = sorted(n for n, (minor, cuda) in glue_indexes.items() if cuda == match["cuda"] and admits(torch, minor))
    if fits:
        return fits, None
    return [], (
        f"no index of CUDA {match['cuda']} with a torch its requirement {torch} admits holds a "
        f"{FLASH_ATTN.package} wheel yet (the indexes are those of the {FLASH_ATTN.package} wheels)"
    )


def _pins(glue: WheelFacts, kernel: WheelFacts) -> bool:
    req = requirement(glue, KERNEL)
    return req is not None and admits(req, kernel.version) and any(s.operator in ("==", "===") for s in req.specifier)
