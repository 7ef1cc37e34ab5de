"""Cell renders kept on disk, so `faforge matrix` and `faforge plan` need no rattler-build run while
nothing a render reads has changed: rattler-build takes about 10 ms a cell, 2 s for the whole matrix.

One file per variant file, config.cache_dir()/renders/<key>.json, where the key is a sha256 over all a
render reads: the recipe, the variant file, the target and host platform, py-rattler-build's version
and the environment variables the recipe reads (`env.get("NAME")`, `env.exists("NAME")`); a recipe that
reads the environment any other way is never cached. An entry is used only when it is a regular file
under its size cap, valid JSON of exactly the expected shape, names its own key and holds every cell
asked for; anything else is rendered again and the entry rewritten. The cached RenderedCell has no
py-rattler-build variant: `faforge build` and `faforge render` render for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as host
import re
import stat
import sys
from collections.abc import Callable, Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING

from faforge import atomic, config
from faforge.matrix.cells import Cell, PipCell
from faforge.matrix.kernels import kernel_key
from faforge.matrix.render import RenderedCell, cell_key, render_cells
from faforge.matrix.render_packages import render_pip_kernels
from faforge.matrix.variants import variant_config_path

if TYPE_CHECKING:
    from faforge.matrix import Matrix

FORMAT = 2  # 2: py-rattler-build named by its version, not its modules' mtimes
MAX_ENTRY_BYTES = 16 * 1024 * 1024  # a whole variant file's cells are ~0.5 MB

ENV_READ = re.compile(r"""\benv\s*\.\s*(?:get|exists)\(\s*(["'])(\w+)\1""")
ENV_ANY = re.compile(r"\benv\b(?!\s*:)")  # any other mention but a YAML `env:` key, comments too: then never cached

STRING_LISTS = ("run_requirements", "run_constraints", "host_requirements", "build_requirements")


def _renderer_identity() -> list:
    """py-rattler-build's version, from its dist-info folder's name beside the package: the same on every
    machine with that release, so a committed render store (render_store) can match it. Read without
    importing rattler_build or importlib.metadata (together 0.3 s, more than a cached matrix)."""
    spec = find_spec("rattler_build")
    folder = Path(spec.origin).parent if spec and spec.origin else None
    return sorted(p.name for p in folder.parent.glob("py_rattler_build-*.dist-info")) if folder else []


def entry_key(
    recipe_path: Path, variant_file: Path, platform: str, environ: Mapping[str, str] = os.environ
) -> str | None:
    """The digest of everything the render of `variant_file` reads, with the recipe's variables as in
    `environ`, or None when that cannot be known (a file unreadable, which the render itself reports; the
    recipe reads the environment in a way this cannot follow; py-rattler-build not found)."""
    try:
        recipe, variants = recipe_path.read_bytes(), variant_file.read_bytes()
    except OSError:
        return None
    text = recipe.decode(errors="replace")
    reads = [m[2] for m in ENV_READ.finditer(text)]
    renderer = _renderer_identity()
    if len(ENV_ANY.findall(text)) != len(reads) or not renderer:
        return None
    material = {
        "format": FORMAT,
        "py-rattler-build": renderer,
        "host": [sys.platform, host.machine()],
        "target_platform": platform,
        "recipe": hashlib.sha256(recipe).hexdigest(),
        "variants": hashlib.sha256(variants).hexdigest(),
        "env": {name: environ.get(name) for name in sorted(set(reads))},
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def _record(rendered: RenderedCell) -> dict:
    return {
        "build_string": rendered.build_string,
        "hash": rendered.hash,
        "recipe": rendered.recipe,
        **{name: list(getattr(rendered, name)) for name in STRING_LISTS},
    }


def _is_record(record: object) -> bool:
    return (
        isinstance(record, dict)
        and set(record) == {"build_string", "hash", "recipe", *STRING_LISTS}
        and isinstance(record["build_string"], str)
        and isinstance(record["hash"], str)
        and isinstance(record["recipe"], dict)
        and isinstance(record["recipe"].get("package"), dict)
        and all(isinstance(record["recipe"]["package"].get(f), str) for f in ("name", "version"))
        and all(isinstance(record[n], list) and all(isinstance(s, str) for s in record[n]) for n in STRING_LISTS)
    )


def _from_record(cell: Cell, record: dict) -> RenderedCell:
    return RenderedCell(
        cell=cell,
        build_string=record["build_string"],
        hash=record["hash"],
        recipe=record["recipe"],
        **{name: tuple(record[name]) for name in STRING_LISTS},
    )


def read_entry(path: Path, key: str) -> dict:
    """The entry's cells by cell key, or {} for a missing, oversized, irregular or malformed entry."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_ENTRY_BYTES:
            return {}
        data = f.read(MAX_ENTRY_BYTES + 1)
    try:
        entry = json.loads(data)
    except (ValueError, RecursionError):
        return {}
    if not (
        isinstance(entry, dict)
        and entry.get("key") == key
        and isinstance(entry.get("cells"), dict)
        and all(_is_record(r) for r in entry["cells"].values())
    ):
        return {}
    return entry["cells"]


def entry_name(key_of_cell: tuple) -> str:
    return "|".join(key_of_cell)


def _entry_path(platform: str, world: str, key: str | None) -> Path | None:
    return config.cache_dir() / "renders" / f"{platform}-{world}-{key}.json" if key else None


def record_name(rendered: RenderedCell) -> str:
    """A record's name in its entry: the cell key of a flash-attn
    render, the kernel key id of a pip world's kernel render."""
    return (
        kernel_key(rendered.cell).id
        if isinstance(rendered.cell, PipCell)
        else entry_name(cell_key(rendered.cell.variant()))
    )


def entry_text(key: str | None, rendered: list[RenderedCell]) -> str:
    """An entry as JSON, one cell a line (the render store is committed, and reviewed as a diff)."""
    cells = {record_name(r): _record(r) for r in rendered}
    lines = [f"  {json.dumps(name)}: {json.dumps(record, sort_keys=True)}" for name, record in sorted(cells.items())]
    return "{" + f'"key": {json.dumps(key)}, "cells": {{\n' + ",\n".join(lines) + "\n}}\n"


def _store(path: Path | None, key: str | None, rendered: list[RenderedCell]) -> dict:
    """Store the renders as the entry at `path` (none: not cacheable), replacing whatever is there and the
    variant file's older entries; returns the cells as a later read gets them. An unwritable cache costs
    the next run its speed, never this run its result."""
    text = entry_text(key, rendered)
    if path is not None and key:  # a path is named after its key
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            for old in path.parent.glob(path.name.replace(key, "[0-9a-f]" * len(key))):
                if old != path or not stat.S_ISREG(os.lstat(old).st_mode):
                    old.unlink()
            atomic.write_text(path, text)
        except OSError:
            pass
    return json.loads(text)["cells"]


def _cached_records(
    recipe_path: Path,
    variants_dir: Path,
    platform: str,
    world: str,
    names: list[str],
    render: Callable[..., list[RenderedCell]],
) -> dict:
    """The records named `names` of one variant file's entry: from this machine's cache, else from the
    committed render store when its key is today's, else `render()`ed (a list of RenderedCell) and cached."""
    variant_file = variant_config_path(variants_dir, platform, world)
    key = entry_key(recipe_path, variant_file, platform)
    path = _entry_path(platform, world, key)
    cached = read_entry(path, key) if path and key else {}
    if not all(name in cached for name in names) and key and key == entry_key(recipe_path, variant_file, platform, {}):
        cached = read_entry(store_path(variants_dir, platform, world), key)
    if not all(name in cached for name in names):
        cached = _store(path, key, render())
    return cached


def cached_render_cells(cells: list[Cell], recipe_path: Path, variants_dir: Path) -> list[RenderedCell]:
    """render_cells' result, without the py-rattler-build variants: from this machine's cache, else from
    the committed render store (render_store) when its key is today's, else rendered and cached."""
    out = []
    for platform, world in sorted({(c.platform, c.world) for c in cells}):
        wanted = [c for c in cells if (c.platform, c.world) == (platform, world)]
        names = [entry_name(cell_key(c.variant())) for c in wanted]
        cached = _cached_records(
            recipe_path,
            variants_dir,
            platform,
            world,
            names,
            lambda wanted=wanted: render_cells(wanted, recipe_path, variants_dir),
        )
        out += [_from_record(c, cached[name]) for c, name in zip(wanted, names, strict=True)]
    return sorted(out, key=lambda rc: rc.cell.sort_key)


def cached_pip_kernels(cells: list[PipCell], recipe_path: Path, variants_dir: Path) -> dict[str, RenderedCell]:
    """render_pip_kernels' result (kernel key id -> the kernel output's render), from the cache or the render
    store as cached_render_cells reads them; a pip world's entry holds one record per kernel key, named by its id."""
    out: dict[str, RenderedCell] = {}
    for platform, world in sorted({(c.platform, c.world) for c in cells}):
        first: dict[str, PipCell] = {}
        for c in cells:
            if (c.platform, c.world) == (platform, world):
                first.setdefault(kernel_key(c).id, c)
        cached = _cached_records(
            recipe_path,
            variants_dir,
            platform,
            world,
            list(first),
            lambda first=first: list(render_pip_kernels(list(first.values()), recipe_path, variants_dir).values()),
        )
        out |= {name: _from_record(cell, cached[name]) for name, cell in first.items()}
    return out


def store_path(variants_dir: Path, platform: str, world: str) -> Path:
    """The committed render store's file for a variant file (see render_store)."""
    return variants_dir / "renders" / f"{platform}-{world}.json"


def selected_cells(matrix: Matrix, platform: str) -> list[RenderedCell]:
    """The rendered cells of one platform, or of all (`all`), from the cache where it holds them."""
    cells = [c for c in matrix.cells if platform in ("all", c.platform)]
    return cached_render_cells(cells, matrix.recipe_path, matrix.variants_dir)
