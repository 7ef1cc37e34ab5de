"""The render store: variants/renders/PLATFORM-WORLD.json, every cell's render committed beside the
variant configs and written by `faforge generate`, so that the first `faforge matrix` or `faforge plan`
on a fresh clone needs no rattler-build run (2 s for the whole matrix on the development machine; the
target is 1 s).

A store file is a render-cache entry (render_cache) under the key of no environment variable set: it is
used only when today's inputs give that key (the same recipe, variant file, platform, host and
py-rattler-build release, and none of the variables the recipe reads set). Any other file is stale:
never used, and reported by `faforge generate --check`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from faforge.matrix.cells import Cell, PipCell
from faforge.matrix.kernels import kernel_key
from faforge.matrix.render import cell_key, render_cells
from faforge.matrix.render_cache import entry_key, entry_name, entry_text, read_entry, store_path
from faforge.matrix.render_packages import render_pip_kernels
from faforge.matrix.variants import variant_config_path


def store_files(
    cells: list[Cell], recipe_path: Path, variants_dir: Path, pip_cells: Sequence[PipCell] = ()
) -> dict[Path, str]:
    """Each store file's expected text. A file that holds today's key and exactly these cells is its own
    expected text, so a check renders nothing; any other is rendered anew (about 10 ms a cell). A
    variant file whose render cannot be keyed (see entry_key) has no store file. A pip world's file holds
    the kernel output of each kernel key of its cells (render_cache.cached_pip_kernels)."""
    expected = {}
    for platform, world in sorted({(c.platform, c.world) for c in [*cells, *pip_cells]}):
        wanted = [c for c in cells if (c.platform, c.world) == (platform, world)]
        pip = [c for c in pip_cells if (c.platform, c.world) == (platform, world)]
        key = entry_key(recipe_path, variant_config_path(variants_dir, platform, world), platform, {})
        if key is None:
            continue
        path = store_path(variants_dir, platform, world)
        names = {entry_name(cell_key(c.variant())) for c in wanted} | {kernel_key(c).id for c in pip}
        if set(read_entry(path, key)) == names:
            expected[path] = path.read_text()
        elif pip:
            expected[path] = entry_text(key, list(render_pip_kernels(pip, recipe_path, variants_dir).values()))
        else:
            expected[path] = entry_text(key, render_cells(wanted, recipe_path, variants_dir))
    return expected


def obsolete_store_files(variants_dir: Path, expected: dict[Path, str]) -> list[Path]:
    """Store files of variant files the matrix no longer produces."""
    return sorted(p for p in (variants_dir / "renders").glob("*.json") if p not in expected)
