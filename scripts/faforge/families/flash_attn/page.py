"""flash-attn 2 on the channel page: its cells (python, torch, CUDA, C++ ABI in the build string) make the
grid, each installed from its own torch world's channels (faforge.release.page.PageFamily)."""

from __future__ import annotations

from collections.abc import Sequence

from rattler import Version

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.matrix.releases import ReleaseTable, World
from faforge.release.package import PackageFacts
from faforge.release.page import install_lines
from faforge.versions import vtuple

key = "packages"
conda_packages = (FLASH_ATTN.package,)


def world_for_abi(table: ReleaseTable, abi: int) -> World:
    for world in table.worlds.values():
        if world.cxx11_abi == abi:
            return world
    raise FaforgeError(
        f"no torch world in {table.path} uses C++ ABI {abi}",
        hint="the channel holds a package this checkout's release table does not know",
    )


def entries(packages: Sequence[PackageFacts], channel: str, table: ReleaseTable) -> list[dict]:
    """One entry per cell build, newest flash-attn first, so the page's grid shows the newest build of each cell."""
    found = []
    for facts in packages:
        if facts.cell_id is None or facts.cxx11_abi is None:
            continue  # not a faforge cell build (no python/torch/CUDA/ABI in its build string)
        world = world_for_abi(table, facts.cxx11_abi)
        found.append(
            {
                "cell": facts.cell_id,
                "platform": facts.subdir,
                "python": facts.python,
                "torch": facts.torch,
                "torch_minor": facts.torch_minor,
                "cuda": facts.cuda,
                "cxx11_abi": facts.cxx11_abi,
                "world": world.name,
                "filename": facts.filename,
                "version": facts.version,
                "build": facts.build,
                "sha256": facts.sha256,
                **install_lines(facts, [channel, *world.channels]),
            }
        )
    found.sort(
        key=lambda p: (p["platform"], vtuple(p["torch"]), vtuple(p["cuda"]), p["python"], Version(p["version"])),
        reverse=True,
    )
    return found


def summary(found: list[dict]) -> str | None:
    return f"{len(found)} packages"
