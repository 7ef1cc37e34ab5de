"""flash-attn 2 on the channel page: its cells (python, torch, CUDA, C++ ABI in the build string) make the
grid, each installed from its own torch world's channels; its pip cells (the matrix's cells for PyPI's torch)
give the pip and uv lines, each from the wheel index of its torch minor and CUDA, and, with the wheel index
read, whether its glue wheel is published there (faforge.release.page.PageFamily)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.matrix import Matrix
from faforge.matrix.pip_builds import PipBuild, pip_builds
from faforge.matrix.releases import ReleaseTable, World
from faforge.pipindex import instructions
from faforge.pipindex.read import read_published
from faforge.release.package import PackageFacts
from faforge.release.page import conda_version, install_lines
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
        key=lambda p: (p["platform"], vtuple(p["torch"]), vtuple(p["cuda"]), p["python"], conda_version(p["version"])),
        reverse=True,
    )
    return found


def published_glue_wheels(where: str, index_names: set[str]) -> dict[str, tuple[str, ...]]:
    """Index name -> the flash-attn wheel files its index lists, for each of `index_names` the wheel index at
    `where` holds (a root folder `faforge publish --index` wrote, or its base URL; an index it lacks is left out),
    read as `plan --index` reads it (faforge.pipindex.read.read_published: a page it cannot read is an error)."""
    found = {}
    for name in sorted(index_names):
        listing = read_published(where, name)
        if listing is not None:
            found[name] = tuple(f.filename for f in listing.files().get(FLASH_ATTN.package, ()))
    return found


def pip_cell_entries(builds: list[PipBuild], base: str, published: dict[str, tuple[str, ...]] | None) -> list[dict]:
    """One entry per pip cell with its pip, uv and requirements.txt lines; with `published` (the wheel index
    read), whether its glue wheel is there (None: the index was not read)."""
    entries: list[dict[str, Any]] = []  # the page's JSON
    for b in builds:
        c = b.cell
        index = instructions.index_url(c.index_name, base)
        pins = instructions.requirements(b.glue_version, c.torch)
        wheel = None
        if published is not None:
            wheel = next((f for f in published.get(c.index_name, ()) if b.glue_wheel_pattern().fullmatch(f)), None)
        entries.append(
            {
                "cell": c.id,
                "grid_cell": c.id.split("/", 1)[1],
                "platform": c.platform,
                "python": c.python,
                "torch": c.torch,
                "torch_minor": c.torch_minor,
                "cuda": c.cuda,
                "cxx11_abi": c.cxx11_abi,
                "torch_wheel": c.wheel,
                "index_name": c.index_name,
                "index_url": index,
                "version": b.glue_version,
                "published": None if published is None else wheel is not None,
                "wheel": wheel,
                "pip_install": instructions.pip_command(index, pins),
                "uv_install": instructions.uv_command(index, pins),
                "requirements_txt": instructions.requirements_txt(index, pins),
            }
        )
    entries.sort(
        key=lambda p: (p["platform"], vtuple(p["torch"]), vtuple(p["cuda"]), vtuple(p["python"])), reverse=True
    )
    return entries


def pip_entries(matrix: Matrix, base: str, index: str | None) -> list[dict]:
    """Its pip cells' lines; with `index`, the glue wheels it lists are read first (an unreadable page: an error)."""
    builds = pip_builds(matrix)
    published = published_glue_wheels(index, {b.cell.index_name for b in builds}) if index is not None else None
    return pip_cell_entries(builds, base, published)


def summary(found: list[dict]) -> str | None:
    return f"{len(found)} packages"
