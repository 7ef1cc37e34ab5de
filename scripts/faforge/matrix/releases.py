"""The torch release table (variants/releases.yaml): which torch builds exist, per world."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faforge.datafile import load_yaml
from faforge.errors import DataError
from faforge.versions import is_version, minor_of, vtuple

PLATFORMS = ("linux-64", "linux-aarch64")
ROW_KEYS = ("world", "torch", "cuda", "python", "platforms", "tegra", "source")


@dataclass(frozen=True)
class World:
    """A way of getting torch into a conda env: conda-forge, or the legacy pytorch channel."""

    name: str
    channels: tuple[str, ...]
    cxx11_abi: int
    platforms: tuple[str, ...]


@dataclass(frozen=True)
class Release:
    """One torch version built for one CUDA version in one world."""

    world: str
    torch: str
    cuda: str
    python: tuple[str, ...]
    platforms: tuple[str, ...]
    source: tuple[str, ...]
    # conda-forge also publishes a Jetson (tegra) linux-aarch64 build of this torch+CUDA;
    # we build sbsa only, and the run requirements keep tegra out.
    tegra: bool = False

    @property
    def torch_minor(self) -> str:
        return minor_of(self.torch)


@dataclass(frozen=True)
class ReleaseTable:
    path: Path
    worlds: dict[str, World]
    releases: tuple[Release, ...]

    def rows_for(self, world: str, torch_minor: str) -> list[Release]:
        return [r for r in self.releases if r.world == world and r.torch_minor == torch_minor]


def _require(path, key, value, kind, check=None, hint=None):
    if not isinstance(value, kind) or (check is not None and not check(value)):
        raise DataError(path, key, f"invalid value {value!r}", hint=hint)
    return value


def _str_list(path, key, value, check=None, hint=None) -> tuple[str, ...]:
    _require(path, key, value, list, lambda v: len(v) > 0, hint or "expected a non-empty list")
    for i, item in enumerate(value):
        _require(path, f"{key}[{i}]", item, str, check, hint)
    return tuple(value)


def _parse_world(path: Path, name: str, raw) -> World:
    key = f"worlds.{name}"
    _require(path, key, raw, dict)
    abi = _require(path, f"{key}.cxx11_abi", raw.get("cxx11_abi"), int, lambda v: v in (0, 1), "expected 0 or 1")
    platforms = _str_list(path, f"{key}.platforms", raw.get("platforms"), lambda p: p in PLATFORMS, f"expected one of {PLATFORMS}")
    channels = _str_list(path, f"{key}.channels", raw.get("channels"))
    return World(name=name, channels=channels, cxx11_abi=abi, platforms=platforms)


def _parse_release(path: Path, index: int, raw, worlds: dict[str, World]) -> Release:
    key = f"releases[{index}]"
    _require(path, key, raw, dict, hint=f"each release is a mapping with keys {', '.join(ROW_KEYS)}")
    unknown = sorted(set(raw) - set(ROW_KEYS))
    if unknown:
        raise DataError(path, f"{key}.{unknown[0]}", "unknown key", hint=f"allowed keys: {', '.join(ROW_KEYS)}")
    world = _require(path, f"{key}.world", raw.get("world"), str, lambda w: w in worlds, f"expected one of {sorted(worlds)}")
    torch = _require(path, f"{key}.torch", raw.get("torch"), str, is_version, "expected a quoted version such as '2.7.1'")
    cuda = _require(path, f"{key}.cuda", raw.get("cuda"), str, is_version, "expected a quoted version such as '12.9'")
    python = _str_list(path, f"{key}.python", raw.get("python"), lambda v: is_version(v) and len(vtuple(v)) == 2, "expected versions such as '3.12'")
    platforms = _str_list(path, f"{key}.platforms", raw.get("platforms"), lambda p: p in worlds[world].platforms, f"expected platforms of world {world}: {worlds[world].platforms}")
    tegra = _require(path, f"{key}.tegra", raw.get("tegra", False), bool, hint="true or false")
    source = raw.get("source")
    sources = (source,) if isinstance(source, str) else _str_list(path, f"{key}.source", source)
    if not all(s.strip() for s in sources):
        raise DataError(path, f"{key}.source", "empty source", hint="cite a feedstock commit, a channel listing or a PyPI file")
    return Release(world=world, torch=torch, cuda=cuda, python=python, platforms=platforms, source=sources, tegra=tegra)


def load_releases(path: Path) -> ReleaseTable:
    raw = load_yaml(path)
    _require(path, "(top level)", raw, dict)
    _require(path, "schema", raw.get("schema"), int, lambda v: v == 1, "this faforge reads schema 1")
    worlds_raw = _require(path, "worlds", raw.get("worlds"), dict)
    worlds = {name: _parse_world(path, name, w) for name, w in worlds_raw.items()}
    rows = _require(path, "releases", raw.get("releases"), list)
    releases = tuple(_parse_release(path, i, row, worlds) for i, row in enumerate(rows))
    seen = {}
    for i, r in enumerate(releases):
        ident = (r.world, r.torch, r.cuda)
        if ident in seen:
            raise DataError(path, f"releases[{i}]", f"duplicate of releases[{seen[ident]}] ({r.world} torch {r.torch} cuda {r.cuda})")
        seen[ident] = i
    return ReleaseTable(path=path, worlds=worlds, releases=releases)


def dump_releases(table: ReleaseTable, header: str) -> str:
    """The canonical text of the table: header comment, worlds, then sorted rows."""
    lines = [header.rstrip("\n"), "schema: 1", "worlds:"]
    for world in table.worlds.values():
        lines += [
            f"  {world.name}:",
            f"    channels: [{', '.join(world.channels)}]",
            f"    cxx11_abi: {world.cxx11_abi}",
            f"    platforms: [{', '.join(world.platforms)}]",
        ]
    lines.append("releases:")
    world_order = list(table.worlds)
    rows = sorted(table.releases, key=lambda r: (world_order.index(r.world), vtuple(r.torch), vtuple(r.cuda)))
    for r in rows:
        lines += [
            f"- world: {r.world}",
            f"  torch: {r.torch}",
            f"  cuda: '{r.cuda}'",
            f"  python: [{', '.join(repr(p) for p in r.python)}]",
            f"  platforms: [{', '.join(r.platforms)}]",
        ]
        if r.tegra:
            lines.append("  tegra: true")
        if len(r.source) == 1:
            lines.append(f"  source: {r.source[0]}")
        else:
            lines.append("  source:")
            lines += [f"  - {s}" for s in r.source]
    return "\n".join(lines) + "\n"


def header_of(text: str) -> str:
    """The leading comment block of a data file, kept verbatim on rewrite."""
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line)
    return "\n".join(header) + "\n"
