"""FlashAttention-3 on the channel page: one entry per package (platform, CUDA, arch list), listed beside the
grid; no python, torch or C++ ABI in its build, it serves every torch from its floor on and installs from
its world's channels (faforge.release.page.PageFamily)."""

from __future__ import annotations

from collections.abc import Sequence

from faforge import paths
from faforge.families.flash_attn_3.matrix import load_fa3_policy
from faforge.family import FLASH_ATTN_3
from faforge.matrix import Matrix
from faforge.matrix.releases import ReleaseTable
from faforge.release.package import PackageFacts
from faforge.release.page import conda_version, install_lines
from faforge.versions import vtuple

key = FLASH_ATTN_3.key
conda_packages = (FLASH_ATTN_3.package,)


def entries(packages: Sequence[PackageFacts], channel: str, table: ReleaseTable) -> list[dict]:
    """Its packages of the channel, newest first per (platform, CUDA, arch list); one whose build string names
    no faforge package (another builder's) is left out."""
    world = table.worlds.get(load_fa3_policy(paths.variants_dir() / "matrix.yaml").world)
    if world is None:
        return []
    found = [entry(facts, [channel, *world.channels]) for facts in packages if facts.package_id is not None]
    found.sort(
        key=lambda p: (p["platform"], vtuple(p["cuda"]), p["cuda_archs"], conda_version(p["version"])), reverse=True
    )
    return found


def entry(facts: PackageFacts, channels: list[str]) -> dict:
    """A flash-attn-3 package: no python, torch or C++ ABI in its build; it serves every torch from its floor on."""
    python = next(
        (d.split(None, 1)[1] for d in facts.depends if d.startswith("python ") and len(d.split(None, 1)) == 2), None
    )
    return {
        "id": facts.package_id,
        "platform": facts.subdir,
        "cuda": facts.cuda,
        "cuda_archs": facts.cuda_archs,
        "min_torch": facts.torch,
        "served_torch": f"torch >= {facts.torch}" if facts.torch else None,
        "python": python,
        "filename": facts.filename,
        "version": facts.version,
        "build": facts.build,
        "sha256": facts.sha256,
        **install_lines(facts, channels),
    }


def pip_entries(matrix: Matrix, base: str, index: str | None) -> list[dict]:
    """None on the page yet: its wheels are installed from the glue wheels' indexes, with no lines of their own."""
    return []


def summary(found: list[dict]) -> str | None:
    return f"{len(found)} {FLASH_ATTN_3.package} packages" if found else None
