"""A torch this Python does not import, read from its files: site-packages/torch's version.py, headers and
libraries (--torch-site), for the glue built for another machine (faforge.backend.foreign).

Only a torch whose cpp_extension adds no pybind11 ABI defines can be read this way: torch with pybind11 2.x (2.8
and older) passes -DPYBIND11_COMPILER_TYPE/_STDLIB/_BUILD_ABI read from torch._C, which only an import can tell;
pybind11 3 dropped them (torch 2.11's _get_pybind11_abi_build_flags returns []). So reading one refuses such a
torch, naming what to do instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from faforge.backend.errors import BuildError
from faforge.family import FLASH_ATTN

FIRST_PYBIND11_WITHOUT_ABI_DEFINES = 3
_PYBIND11_MAJOR = re.compile(r"^#\s*define\s+PYBIND11_VERSION_MAJOR\s+(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class TargetTorch:
    """A torch read from its files: site-packages/torch's version.py, headers and libraries."""

    site: Path
    version: str
    cuda: str | None
    cxx11_abi: int | None
    machine: str | None

    @property
    def include_dirs(self) -> list[str]:
        """cpp_extension.include_paths(): torch/include and its torch/csrc/api/include."""
        include = self.site / "torch" / "include"
        return [str(include), str(include / "torch" / "csrc" / "api" / "include")]

    @property
    def lib_dir(self) -> Path:
        return self.site / "torch" / "lib"


def read_torch_site(site: Path) -> TargetTorch:
    """The torch in `site` (a site-packages holding torch/), never imported; BuildError naming what is missing."""
    from faforge.abi.check import torch_facts  # noqa: PLC0415  (needs pyelftools, a host requirement of the glue)

    torch = site / "torch"
    missing = [p for p in ("version.py", "include/torch/extension.h", "lib") if not (torch / p).exists()]
    if missing:
        raise BuildError(
            f"--torch-site {site}: no torch/{missing[0]} there; pass the site-packages holding the target's torch "
            "(pip install --target DIR --platform manylinux_2_28_aarch64 "
            "--only-binary=:all: --python-version 3.11 torch==X)"
        )
    facts = torch_facts([torch / "lib"])
    if not facts.version:
        raise BuildError(f"--torch-site {site}: torch/version.py names no __version__")
    if facts.cuda is None:
        raise BuildError(
            f"--torch-site {site}: torch {facts.version} is a CPU "
            f"build; {FLASH_ATTN.package} needs a CUDA build of torch"
        )
    major = pybind11_major(torch / "include")
    if major is None or major < FIRST_PYBIND11_WITHOUT_ABI_DEFINES:
        raise BuildError(
            f"--torch-site {site}: torch {facts.version} bundles pybind11 "
            f"{major or 'of no known version'}, whose ABI defines "
            "torch's cpp_extension reads from torch._C, which only "
            "an import can tell; build it with that torch's Python "
            "(without --torch-site), or a torch whose pybind11 is "
            f"{FIRST_PYBIND11_WITHOUT_ABI_DEFINES} or newer (2.11 and newer)"
        )
    return TargetTorch(
        site=site, version=facts.version, cuda=facts.cuda, cxx11_abi=facts.cxx11_abi, machine=facts.machine
    )


def pybind11_major(include: Path) -> int | None:
    try:
        match = _PYBIND11_MAJOR.search((include / "pybind11" / "detail" / "common.h").read_text(errors="replace"))
    except OSError:
        return None
    return int(match.group(1)) if match else None
