"""Reading variants/releases.yaml: every rule a world or a row must meet, each failure a DataError naming its key.

faforge.matrix.releases holds the table's types and writes its canonical text; the rules of reading are the
larger part and grow on their own (a new key, a second kind of world), so they live here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from faforge.datafile import load_yaml
from faforge.errors import DataError
from faforge.matrix.releases import (
    PLATFORMS,
    TORCH_WHEEL,
    WHEEL_ARCH_PLATFORMS,
    PipRelease,
    PipWorld,
    Release,
    ReleaseTable,
    World,
    wheel_python,
)
from faforge.versions import is_version, vtuple

ROW_KEYS = ("world", "torch", "cuda", "python", "platforms", "tegra", "source")
PIP_WORLD_KEYS = ("index", "channels", "platforms")
PIP_ROW_KEYS = ("world", "torch", "cuda", "python", "platforms", "cxx11_abi", "index", "source")


T = TypeVar("T")


def _require(
    path: Path,
    key: str,
    value: object,
    kind: type[T],
    check: Callable[[T], bool] | None = None,
    hint: str | None = None,
) -> T:
    if not isinstance(value, kind) or (check is not None and not check(value)):
        raise DataError(path, key, f"invalid value {value!r}", hint=hint)
    return value


def _str_list(
    path: Path, key: str, value: object, check: Callable[[str], bool] | None = None, hint: str | None = None
) -> tuple[str, ...]:
    items = _require(path, key, value, list, lambda v: len(v) > 0, hint or "expected a non-empty list")
    for i, item in enumerate(items):
        _require(path, f"{key}[{i}]", item, str, check, hint)
    return tuple(items)


def _parse_world(path: Path, name: str, raw: object) -> World:
    key = f"worlds.{name}"
    raw = _require(path, key, raw, dict)
    abi = _require(path, f"{key}.cxx11_abi", raw.get("cxx11_abi"), int, lambda v: v in (0, 1), "expected 0 or 1")
    platforms = _str_list(
        path, f"{key}.platforms", raw.get("platforms"), lambda p: p in PLATFORMS, f"expected one of {PLATFORMS}"
    )
    channels = _str_list(path, f"{key}.channels", raw.get("channels"))
    return World(name=name, channels=channels, cxx11_abi=abi, platforms=platforms)


def _url(path: Path, key: str, value: object) -> str:
    return _require(
        path, key, value, str, lambda v: bool(re.fullmatch(r"https?://[^\s/]+(/\S*)?", v)), "expected an http(s) URL"
    )


def _parse_pip_world(path: Path, name: str, raw: dict) -> PipWorld:
    key = f"worlds.{name}"
    unknown = sorted(set(raw) - set(PIP_WORLD_KEYS))
    if unknown:
        raise DataError(
            path,
            f"{key}.{unknown[0]}",
            "unknown key",
            hint=f"a pip world (one with `index`) has keys {', '.join(PIP_WORLD_KEYS)}",
        )
    platforms = _str_list(
        path, f"{key}.platforms", raw.get("platforms"), lambda p: p in PLATFORMS, f"expected one of {PLATFORMS}"
    )
    channels = _str_list(
        path, f"{key}.channels", raw.get("channels"), hint="the conda channels its own kernel packages build with"
    )
    return PipWorld(
        name=name,
        index=_url(path, f"{key}.index", raw.get("index")).rstrip("/"),
        channels=channels,
        platforms=platforms,
    )


def _builds(
    path: Path, key: str, raw: dict, world: World | PipWorld
) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    """A row's torch and CUDA versions, its pythons and its platforms (among its world's), as both kinds of
    world write them."""
    torch = _require(
        path, f"{key}.torch", raw.get("torch"), str, is_version, "expected a quoted version such as '2.7.1'"
    )
    cuda = _require(path, f"{key}.cuda", raw.get("cuda"), str, is_version, "expected a quoted version such as '12.9'")
    python = _str_list(
        path,
        f"{key}.python",
        raw.get("python"),
        lambda v: is_version(v) and len(vtuple(v)) == 2,
        "expected versions such as '3.12'",
    )
    platforms = _str_list(
        path,
        f"{key}.platforms",
        raw.get("platforms"),
        lambda p: p in world.platforms,
        f"expected platforms of world {world.name}: {world.platforms}",
    )
    return torch, cuda, python, platforms


def _parse_pip_release(path: Path, index: int, raw: dict, worlds: dict[str, PipWorld]) -> PipRelease:
    key = f"releases[{index}]"
    unknown = sorted(set(raw) - set(PIP_ROW_KEYS))
    if unknown:
        raise DataError(
            path, f"{key}.{unknown[0]}", "unknown key", hint=f"a pip world's rows have keys {', '.join(PIP_ROW_KEYS)}"
        )
    world = worlds[raw["world"]]
    torch, cuda, python, platforms = _builds(path, key, raw, world)
    abi = _require(
        path,
        f"{key}.cxx11_abi",
        raw.get("cxx11_abi"),
        int,
        lambda v: v in (0, 1) and v is not True and v is not False,
        "0 or 1: the C++ ABI read from the torch build (faforge.abi.classify.torch_cxx11_abi over its libc10.so)",
    )
    own_index = _url(path, f"{key}.index", raw["index"]).rstrip("/") if "index" in raw else None
    source = raw.get("source")
    wheels = _str_list(
        path,
        f"{key}.source",
        [source] if isinstance(source, str) else source,
        hint="the torch wheel file names the row was read from, one per python and platform",
    )
    wanted = {(p, plat) for p in python for plat in platforms}
    seen: dict[tuple[str, str], str] = {}
    for i, name in enumerate(wheels):
        match = TORCH_WHEEL.fullmatch(name)
        pair = (wheel_python(match), WHEEL_ARCH_PLATFORMS[match["arch"]]) if match else None
        if match is None or match["version"] != torch or pair not in wanted or pair in seen:
            why = (
                "not a CPython torch wheel file name"
                if match is None or pair is None
                else f"not a wheel of torch {torch}"
                if match["version"] != torch
                else f"a second wheel for python {pair[0]} on {pair[1]} (also {seen[pair]})"
                if pair in seen
                else f"python {pair[0]} on {pair[1]} is not among the row's python and platforms"
            )
            raise DataError(
                path,
                f"{key}.source[{i}]",
                f"{name!r}: {why}",
                hint="one wheel file name per python and platform of the row, as the index lists it",
            )
        seen[pair] = name
    missing = sorted(wanted - set(seen))
    if missing:
        raise DataError(
            path,
            f"{key}.source",
            f"no wheel for python {missing[0][0]} on {missing[0][1]}",
            hint="list the wheel the row's python and platform were read from, or drop them from the row",
        )
    return PipRelease(
        world=world.name,
        torch=torch,
        cuda=cuda,
        python=python,
        platforms=platforms,
        cxx11_abi=abi,
        source=wheels,
        index=own_index,
    )


def _parse_release(path: Path, index: int, raw: object, worlds: dict[str, World]) -> Release:
    key = f"releases[{index}]"
    raw = _require(path, key, raw, dict, hint=f"each release is a mapping with keys {', '.join(ROW_KEYS)}")
    if "cxx11_abi" in raw:
        raise DataError(
            path,
            f"{key}.cxx11_abi",
            "unknown key",
            hint=f"a conda world's C++ ABI is the world's "
            f"(worlds.{raw.get('world')}.cxx11_abi); only a pip world's rows carry their own",
        )
    unknown = sorted(set(raw) - set(ROW_KEYS))
    if unknown:
        raise DataError(path, f"{key}.{unknown[0]}", "unknown key", hint=f"allowed keys: {', '.join(ROW_KEYS)}")
    world = _require(
        path, f"{key}.world", raw.get("world"), str, lambda w: w in worlds, f"expected one of {sorted(worlds)}"
    )
    torch, cuda, python, platforms = _builds(path, key, raw, worlds[world])
    tegra = _require(path, f"{key}.tegra", raw.get("tegra", False), bool, hint="true or false")
    source = raw.get("source")
    sources = (source,) if isinstance(source, str) else _str_list(path, f"{key}.source", source)
    if not all(s.strip() for s in sources):
        raise DataError(
            path, f"{key}.source", "empty source", hint="cite a feedstock commit, a channel listing or a PyPI file"
        )
    return Release(world=world, torch=torch, cuda=cuda, python=python, platforms=platforms, source=sources, tegra=tegra)


def load_releases(path: Path) -> ReleaseTable:
    raw = load_yaml(path)
    _require(path, "(top level)", raw, dict)
    _require(path, "schema", raw.get("schema"), int, lambda v: v == 1, "this faforge reads schema 1")
    worlds_raw = _require(path, "worlds", raw.get("worlds"), dict)
    for name, w in worlds_raw.items():
        _require(path, f"worlds.{name}", w, dict)
    # A world with an `index` is a pip world; every other is a conda world.
    worlds = {name: _parse_world(path, name, w) for name, w in worlds_raw.items() if "index" not in w}
    pip_worlds = {name: _parse_pip_world(path, name, w) for name, w in worlds_raw.items() if "index" in w}
    rows = _require(path, "releases", raw.get("releases"), list)
    releases: list[Release] = []
    pip_releases: list[PipRelease] = []
    seen: dict[tuple[str, ...], int] = {}
    r: Release | PipRelease
    for i, row in enumerate(rows):
        if isinstance(row, dict) and row.get("world") in pip_worlds:
            r = _parse_pip_release(path, i, row, pip_worlds)
            pip_releases.append(r)
            # A pip world may split a release by platform (pythons or ABI that differ), never repeat one.
            idents: list[tuple[str, ...]] = [(r.world, r.torch, r.cuda, p) for p in r.platforms]
        else:
            r = _parse_release(path, i, row, worlds)
            releases.append(r)
            idents = [(r.world, r.torch, r.cuda)]
        for ident in idents:
            if ident in seen:
                raise DataError(
                    path,
                    f"releases[{i}]",
                    f"duplicate of releases[{seen[ident]}] ({r.world} torch {r.torch} cuda {r.cuda}"
                    + (f" on {ident[3]})" if len(ident) == 4 else ")"),
                )
            seen[ident] = i
    return ReleaseTable(
        path=path, worlds=worlds, releases=tuple(releases), pip_worlds=pip_worlds, pip_releases=tuple(pip_releases)
    )
