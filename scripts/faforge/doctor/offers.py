"""Which matrix cells a user could install, and which one fits an environment as it is.

An Offer is a rendered cell as a user installs it; a Target is the environment's torch as a cell.
Apart from the fixes because matching is plain data (tested on its own), while a fix is command text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from faforge import config
from faforge.doctor.situation import Situation
from faforge.family import FLASH_ATTN
from faforge.matrix.cells import Cell
from faforge.matrix.render import RenderedCell, build_string_head
from faforge.versions import minor_of, vtuple

_CONDA_CUDA = re.compile(
    r"cuda(?P<tag>\d+)"
)  # pytorch builds: cuda129_mkl_py312_h..._302, py3.12_cuda12.1_cudnn9.1.0_0
_LEGACY_CUDA = re.compile(r"_cuda(?P<version>\d+\.\d+)_")
TORCH_RUN_PACKAGES = ("pytorch", "libtorch", "pytorch-cuda", "pytorch-mutex")
CLOSEST = 3


@dataclass(frozen=True)
class Offer:
    """One matrix cell as a user installs it."""

    cell: Cell
    version: str  # flash-attn version
    build_string: str
    run_requirements: tuple[str, ...]

    @property
    def build_glob(self) -> str:
        return f"{build_string_head(self.build_string)}_*"

    @property
    def spec(self) -> str:
        return f"{FLASH_ATTN.package} =={self.version} {self.build_glob}"

    @property
    def torch_specs(self) -> list[str]:
        return [r for r in self.run_requirements if r.split()[0] in TORCH_RUN_PACKAGES]

    @property
    def channels(self) -> list[str]:
        return list(dict.fromkeys([config.public_channel(), *self.cell.channels]))


@dataclass(frozen=True)
class Target:
    """The cell that would fit the environment as it is."""

    platform: str | None
    python: str
    torch: str | None  # release, e.g. "2.7.1"
    cuda: str | None  # "12.9"
    cxx11_abi: int | None
    world: str | None  # conda world of the torch, None for a pip torch

    @property
    def cell_id(self) -> str | None:
        if self.platform is None or self.torch is None or self.cuda is None or self.cxx11_abi is None:
            return None
        return (
            f"{self.platform}/py{self.python.replace('.', '')}/torch{minor_of(self.torch)}"
            f"/cu{self.cuda.replace('.', '')}/abi{self.cxx11_abi}"
        )


def offers_from(rendered: list[RenderedCell]) -> list[Offer]:
    return [Offer(r.cell, str(r.recipe["package"]["version"]), r.build_string, r.run_requirements) for r in rendered]


def release_of(version: str | None) -> str | None:
    match = re.match(r"\d+\.\d+(?:\.\d+)?", version or "")
    return match.group(0) if match else None


def conda_cuda(build: str) -> str | None:
    legacy = _LEGACY_CUDA.search(build)
    if legacy:
        return legacy["version"]
    match = _CONDA_CUDA.search(build)
    return f"{match['tag'][:-1]}.{match['tag'][-1]}" if match else None


def target_of(s: Situation, *, conda_torch: bool = False) -> Target:
    """The environment's torch as a cell: the running torch, or with conda_torch its conda record
    (what remains once a pip copy over it is removed)."""
    facts = s.facts
    record = s.torch.conda_record
    if conda_torch and record is not None:
        return Target(
            facts.system.platform,
            facts.python.minor,
            release_of(record.version),
            conda_cuda(record.build),
            0 if record.world == "pytorch" else 1,
            record.world,
        )
    world = record.world if s.torch.how == "conda" and record is not None else None
    return Target(
        facts.system.platform, facts.python.minor, release_of(s.torch_version), s.torch_cuda, s.torch_abi, world
    )


def matching(offers: list[Offer], target: Target) -> Offer | None:
    if target.cell_id is None:
        return None
    return next((o for o in offers if o.cell.id == target.cell_id and target.world in (None, o.cell.world)), None)


class OfCell(Protocol):
    """What closest reads of an offer: an Offer, or a pip world's build (faforge.matrix.pip_builds.PipBuild)."""

    @property
    def cell(self) -> Cell: ...


OfferT = TypeVar("OfferT", bound=OfCell)


def closest(offers: Sequence[OfferT], target: Target, n: int = CLOSEST) -> list[OfferT]:
    """The cells nearest to the target: same platform and python first, then world, torch minor, CUDA."""

    def distance(o: OfferT) -> tuple:
        cell = o.cell
        torch_gap = abs(_minor_number(cell.torch) - _minor_number(target.torch)) if target.torch else 0
        cuda_gap = abs(_minor_number(cell.cuda) - _minor_number(target.cuda)) if target.cuda else 0
        return (
            cell.platform != target.platform,
            cell.python != target.python,
            target.world is not None and cell.world != target.world,
            target.cxx11_abi is not None and cell.cxx11_abi != target.cxx11_abi,
            torch_gap,
            _major_of(cell.cuda) != _major_of(target.cuda),
            cuda_gap,
            [-x for x in vtuple(cell.torch)],
            [-x for x in vtuple(cell.cuda)],
        )

    return sorted(offers, key=distance)[:n]


def _minor_number(version: str | None) -> int:
    major, minor = (*vtuple(version), 0, 0)[:2] if version else (0, 0)
    return major * 100 + minor


def _major_of(version: str | None) -> int | None:
    return vtuple(version)[0] if version else None


def installed_torch(s: Situation) -> Target:
    """The release and CUDA of the torch installed here, from its metadata alone (a torch that does not
    import says nothing at run time): the conda record's build string, or a wheel's local version
    (2.4.0+cu121) or the CUDA runtime its METADATA requires (PyPI's 2.4.0: nvidia-cuda-runtime-cu12==12.1.105)."""
    install, none = s.torch, Target(s.facts.system.platform, s.facts.python.minor, None, None, None, None)
    if install.how == "conda" and install.conda_record is not None:
        return replace(none, torch=release_of(install.version), cuda=conda_cuda(install.conda_record.build))
    if install.distribution is None:
        return none
    local = re.search(r"\+cu(\d+)$", install.version or "")
    cuda = f"{local[1][:-1]}.{local[1][-1]}" if local else install.distribution.cuda_runtime
    return replace(none, torch=release_of(install.version), cuda=cuda)
