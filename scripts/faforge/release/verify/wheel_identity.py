"""What a wheel under `faforge verify` is (the pip world): its kind, its machine and glibc floor, its pip cell.

A wheel says what it is in its file name and METADATA (faforge.pipwheel.facts); its project is its kind, as the
families list them (faforge.pipwheel.kinds.WheelKind): flash-attn is the glue, libflash-attn-kernels the kernel
wheel. Its platform tags name its machine and glibc floor (faforge.pipwheel.manylinux.linux_platform); a glue's
local label (+torch2.14.cu130.abi1) and its one CPython tag name its pip cell of the matrix; a kernel wheel's
label, or a stable-ABI wheel's, names its CUDA and arch list. A fact a wheel lacks stays None, so the gates that
need it are `skipped` with the reason, never passed. One reading of a wheel, apart from the gates, so that pairing
(faforge.release.verify.wheel_pairs), the gates and the manifest all see the same wheel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels.cachekey import archs_of_tag
from faforge.matrix import load_matrix
from faforge.matrix.cells import PipCell
from faforge.matrix.kernels import KERNEL_BUILD
from faforge.pipwheel.facts import WheelFacts, read_wheel, requirement
from faforge.pipwheel.kinds import ARCHS_LABEL, CELL_LABEL, KERNEL_LABEL, WheelKind
from faforge.pipwheel.layout import KERNEL_DIR
from faforge.pipwheel.manylinux import linux_platform
from faforge.release.clean_env import MACHINE_SUBDIRS
from faforge.release.package import cuda_of_tag
from faforge.versions import vtuple
from faforge.wheelnames import CUDA_ARCHS_LABEL, GLUE_LABEL

KERNEL = canonicalize_name(FLASH_ATTN.kernel_package)
# The kernel wheel's library, in its folder (faforge.pipwheel.layout).
KERNEL_MEMBER = f"{KERNEL_DIR}/{FLASH_ATTN.kernel_soname}"
CPYTHON_TAG = re.compile(r"cp3(?P<minor>[0-9]{1,2})")


@dataclass(frozen=True)
class WheelPackage:
    """One wheel under verification: its facts and what its name and label say of it. Carries what the
    manifest records (path, filename, sha256, cell_id), so release.manifest.record takes it as a package."""

    facts: WheelFacts
    kind: str  # its WheelKind's word: glue | kernel | ...
    subdir: str | None  # linux-64 | linux-aarch64, from its platform tag's machine
    glibc: str | None  # its manylinux tag's glibc floor
    python: str | None = None  # a glue's one CPython (3.11)
    torch_minor: str | None = None  # a glue's torch minor (2.14)
    cuda: str | None = None  # 13.0
    cxx11_abi: int | None = None  # a glue's C++ ABI
    cuda_archs: str | None = None  # a kernel or stable-ABI wheel's arch list, '80;90;100;120+PTX'
    cell: PipCell | None = None  # a glue's pip cell of the matrix

    @property
    def path(self) -> Path:
        return Path(self.facts.path)

    @property
    def filename(self) -> str:
        return self.facts.filename

    @property
    def sha256(self) -> str:
        return self.facts.sha256

    @property
    def cell_id(self) -> str | None:
        return self.cell.id if self.cell else None

    @property
    def requirement(self) -> str:
        """What pip is asked for: this very wheel's project and version."""
        return f"{self.facts.name}=={self.facts.version}"

    def requires(self, project: str) -> Requirement | None:
        return requirement(self.facts, project)

    @property
    def kernel_pin(self) -> str | None:
        """The exact kernel wheel version a glue wheel requires (libflash-attn-kernels==V), or None."""
        req = self.requires(KERNEL) if self.kind == "glue" else None
        exact = [s.version for s in (req.specifier if req else ()) if s.operator in ("==", "===")]
        return exact[0] if exact else None


def is_wheel_path(path: str | Path) -> bool:
    return str(path).endswith(".whl")


@lru_cache(maxsize=1)
def pip_cells() -> tuple[PipCell, ...]:
    return tuple(load_matrix().pip_cells)


def _platform(facts: WheelFacts) -> tuple[str | None, str | None]:
    """(subdir, glibc floor) of the wheel's platform tags; (None, None) when they are not one Linux machine's."""
    found = [linux_platform(t) for t in facts.platform_tags]
    tags = [t for t in found if t is not None]
    subdirs = {MACHINE_SUBDIRS.get(t.machine) for t in tags}
    if not tags or len(tags) != len(found) or len(subdirs) != 1 or None in subdirs:
        return None, None
    floors = [t.glibc for t in tags if t.glibc]
    return subdirs.pop(), (min(floors, key=vtuple) if len(floors) == len(tags) else None)


def wheel_package(path: str | Path, kinds: tuple[WheelKind, ...]) -> WheelPackage:
    """The wheel at `path` (read by faforge.pipwheel.facts.read_wheel: a bad file is exit 2) and what its
    name says: a wheel of none of the projects of `kinds` is exit 2 too, as a file that is no conda package is."""
    facts = read_wheel(path)
    projects: dict[str, WheelKind] = {canonicalize_name(k.project): k for k in kinds}
    found = projects.get(facts.name)
    if found is None:
        raise FaforgeError(
            f"{path}: a {facts.name} wheel, none of the projects faforge verifies ({', '.join(sorted(projects))})",
            hint="pass the wheels `faforge wheel` wrote",
            input=str(path),
        )
    (subdir, glibc), kind = _platform(facts), found.kind
    base = WheelPackage(facts=facts, kind=kind, subdir=subdir, glibc=glibc)
    local = facts.local or ""
    if found.label == CELL_LABEL:
        label, python = (
            GLUE_LABEL.fullmatch(local),
            CPYTHON_TAG.fullmatch(facts.python_tags[0]) if len(facts.python_tags) == 1 else None,
        )
        if not (label and python):
            return base
        cell_id = f"{subdir}/py3{python['minor']}/torch{label['torch']}/cu{label['cuda']}/abi{label['abi']}"
        cell = next((c for c in pip_cells() if c.id.split("/", 1)[1] == cell_id), None)
        return WheelPackage(
            facts=facts,
            kind=kind,
            subdir=subdir,
            glibc=glibc,
            python=f"3.{python['minor']}",
            torch_minor=label["torch"],
            cuda=cuda_of_tag(label["cuda"]),
            cxx11_abi=int(label["abi"]),
            cell=cell,
        )
    if found.label == KERNEL_LABEL:
        build = KERNEL_BUILD.match(local.replace(".", "_") + f"_{facts.build_tag or 0}")
    else:
        build = CUDA_ARCHS_LABEL.fullmatch(local) if found.label == ARCHS_LABEL else None
    if not build:
        return base
    try:
        archs = archs_of_tag(build["archs"].replace(".", "_"))
    except ValueError:
        archs = None
    return WheelPackage(
        facts=facts, kind=kind, subdir=subdir, glibc=glibc, cuda=cuda_of_tag(build["cuda"]), cuda_archs=archs
    )
