"""The rows a pip source proposes for a pip world (`faforge bump --source pypi`): torch wheels on an index.

A pip source (torch-sources.yaml `pip_sources`: PyPI, one of PyTorch's per-CUDA indexes) gives a pip
world's rows: per torch minor from the pip floor on and platform, the newest release's wheels
on its simple page; one wheel of each is read by range requests for its CUDA (torch/version.py: none is a
CPU build, no row) and C++ ABI (torch/lib/libc10.so), and the pythons are its CPython wheels'
(faforge.release.bump.torch_wheels). A release the table has, with that CUDA on that platform, or a newer patch of it,
is not proposed again, whichever index the row came from. Apart from the conda sources (faforge.release.bump.releases)
because it reads wheel indexes, not channels' repodata.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from faforge.datafile import load_yaml
from faforge.errors import DataError, FaforgeError
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import TORCH_WHEEL, WHEEL_ARCH_PLATFORMS, PipRelease, ReleaseTable, wheel_python
from faforge.release.bump.torch_wheels import read_project_files, read_torch_wheel
from faforge.release.package import cuda_of_tag
from faforge.versions import minor_of, vtuple
from faforge.wheelfetch import RemoteFile


@dataclass(frozen=True)
class PipSource:
    """A wheel index whose torch CUDA builds become rows of a pip world."""

    name: str
    world: str
    index: str  # the index root: the project page is INDEX/torch/
    package: str = "torch"


def load_pip_sources(path: Path) -> dict[str, PipSource]:
    raw = load_yaml(path)
    entries = raw.get("pip_sources") or {} if isinstance(raw, dict) else {}
    if not isinstance(entries, dict):
        raise DataError(path, "pip_sources", f"invalid value {entries!r}", hint="a mapping of name -> {world, index}")
    out = {}
    for name, entry in entries.items():
        if (
            not isinstance(entry, dict)
            or set(entry) != {"world", "index"}
            or not all(isinstance(entry[k], str) for k in entry)
            or not entry["index"].startswith(("http://", "https://"))
        ):
            raise DataError(
                path, f"pip_sources.{name}", f"invalid value {entry!r}", hint="keys: world, index (an http(s) URL)"
            )
        out[name] = PipSource(name=name, world=entry["world"], index=entry["index"].rstrip("/"))
    return out


def _build_rank(match: re.Match[str]) -> tuple[int, str]:
    """A wheel build tag's order (PEP 427: its leading digits as a number, then the rest); none sorts first."""
    tag = match["build"]
    if tag is None:
        return (-1, "")
    digits = re.match(r"\d+", tag)
    assert digits is not None  # TORCH_WHEEL's build tag starts with a digit
    return (int(digits[0]), tag[len(digits[0]) :])


def _torch_wheel(file: RemoteFile) -> re.Match[str]:
    """TORCH_WHEEL's match of the name of a file wheel_groups kept."""
    match = TORCH_WHEEL.fullmatch(file.filename)
    assert match is not None  # wheel_groups keeps only the files whose names match it
    return match


def wheel_groups(
    files: list[RemoteFile], platforms: tuple[str, ...], floor: str
) -> dict[tuple[str, str], list[RemoteFile]]:
    """{(torch version, platform): its CPython wheels, one per python}: the newest version per (minor, platform)
    from `floor` on, and per python the wheel pip installs (the highest build tag: torch 2.10.0's rebuild)."""
    best: dict[tuple[str, str, str], tuple[tuple, RemoteFile]] = {}
    for f in files:
        match = TORCH_WHEEL.fullmatch(f.filename)
        if (
            not match
            or WHEEL_ARCH_PLATFORMS[match["arch"]] not in platforms
            or vtuple(minor_of(match["version"])) < vtuple(floor)
        ):
            continue
        key = (match["version"], WHEEL_ARCH_PLATFORMS[match["arch"]], wheel_python(match))
        if key not in best or _build_rank(match) > best[key][0]:
            best[key] = (_build_rank(match), f)
    newest: dict[tuple[str, str], str] = {}
    for version, platform, _ in best:
        if vtuple(version) > vtuple(newest.get((minor_of(version), platform), "0")):
            newest[(minor_of(version), platform)] = version
    out: dict[tuple[str, str], list[RemoteFile]] = defaultdict(list)
    for (version, platform, _python), (_, f) in sorted(
        best.items(), key=lambda kv: (vtuple(kv[0][0]), kv[0][1], vtuple(kv[0][2]))
    ):
        if newest[(minor_of(version), platform)] == version:
            out[(version, platform)].append(f)
    return dict(out)


def _covered(table: ReleaseTable, world: str, torch: str, platform: str, cuda: str | None = None) -> bool:
    """Whether the world has this release (with this CUDA, when
    known) on this platform, or a newer patch of its minor."""
    return any(
        r.world == world
        and platform in r.platforms
        and r.torch_minor == minor_of(torch)
        and vtuple(r.torch) >= vtuple(torch)
        and cuda in (None, r.cuda)
        for r in table.pip_releases
    )


def find_new_pip(
    table: ReleaseTable, policy: BuildPolicy, source: PipSource, cache: Path, index: str | None = None
) -> list[PipRelease]:
    """Rows for `source`'s pip world that its index has and the table lacks (network: the project page, then
    range reads of one wheel per new release and platform, cached under `cache`)."""
    if source.world not in table.pip_worlds:
        raise FaforgeError(
            f"pip source {source.name} names world {source.world!r}, which {table.path} does not define as a pip world",
            hint="a pip world is a `worlds:` entry with an `index`",
        )
    world = table.pip_worlds[source.world]
    root = (index or source.index).rstrip("/")
    files = read_project_files(f"{root}/{source.package}/")
    found: dict[tuple, list[tuple[str, tuple[str, ...]]]] = defaultdict(
        list
    )  # (torch, cuda, abi, pythons) -> [(platform, wheels)]
    for (version, platform), wheels in wheel_groups(
        files, world.platforms, policy.pip_min_torch or policy.min_torch
    ).items():
        local = _torch_wheel(wheels[0])["local"] or ""
        labelled = cuda_of_tag(local[2:]) if re.fullmatch(r"cu\d{2,4}", local) else None
        if _covered(table, world.name, version, platform, labelled) or (labelled is None and local):
            continue  # known (or a CPU/ROCm build, named so by its label)
        facts = read_torch_wheel(wheels[0], cache)
        if facts.cuda is None or _covered(table, world.name, version, platform, facts.cuda):
            continue  # a CPU build (PyPI's aarch64 torch before 2.11), or a release another index gave the table
        pythons = tuple(wheel_python(_torch_wheel(w)) for w in wheels)
        found[(version, facts.cuda, facts.cxx11_abi, pythons)].append((platform, tuple(w.filename for w in wheels)))
    rows = []
    for (version, cuda, abi, pythons), per_platform in sorted(
        found.items(), key=lambda kv: (vtuple(kv[0][0]), vtuple(kv[0][1]))
    ):
        per_platform.sort(key=lambda pw: world.platforms.index(pw[0]))
        rows.append(
            PipRelease(
                world=world.name,
                torch=version,
                cuda=cuda,
                python=pythons,
                platforms=tuple(p for p, _ in per_platform),
                cxx11_abi=abi,
                source=tuple(w for _, ws in per_platform for w in ws),
                # the source's index, not a mirror's (`--channel-url`):
                # the row says where users get the wheel
                index=None if source.index == world.index else source.index,
            )
        )
    return rows
