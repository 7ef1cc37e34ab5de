"""Find torch releases that a world's channel has and variants/releases.yaml lacks.

The channel's repodata is read with py-rattler (faforge.channel.repodata), every CUDA build of
torch is grouped by (version, CUDA), and a group becomes a new release row unless the table
already has that build or a newer patch of the same minor with that CUDA, or the minor is older
than anything the table lists for the world (history the table leaves out on purpose).
A torch minor variants/kernel-abi.yaml has no row for gets one measured from its own PyPI wheel
(faforge.kernels.measure_abi), so no row is written by hand.

A pip source (PyPI, one of PyTorch's per-CUDA indexes) gives a pip world's rows: faforge.release.bump.pip.
Everything is computed in memory; writing happens only after the new table loads and yields cells and each
family's own variant files (BumpFamily).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from faforge import atomic
from faforge.channel.repodata import query
from faforge.datafile import load_yaml
from faforge.errors import DataError, FaforgeError
from faforge.kernels.kernel_abi import PhiloxWidths, Verdict, dump_row
from faforge.kernels.measure_abi import measure_release
from faforge.matrix.cells import Cell, PipCell, build_cells, build_pip_cells
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import (
    PipRelease,
    Release,
    ReleaseTable,
    dump_releases,
    header_of,
)
from faforge.matrix.releases_read import load_releases
from faforge.matrix.render_store import store_files
from faforge.matrix.variants import generated_files, stale_files
from faforge.release.package import cuda_of_tag
from faforge.versions import minor_of, vtuple
from faforge.wheelfetch import list_files

if TYPE_CHECKING:
    from rattler import RepoDataRecord

TEGRA = re.compile(r"^arm-variant\s+\*\s+tegra$")


class BumpFamily(Protocol):
    """A family's part of `faforge bump` (its module's `bump`)."""

    def variant_files(self, table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> dict[Path, str]:
        """The generated variant files of its own packages, beyond the matrix's cells, for `table`, with their
        expected content: a new torch release regenerates them with the cells' files."""
        ...

    def proposals(self, mirror: str | None, gate: bool) -> Proposal | None:
        """The family's own upstream releases that its data lacks, with proposed rows (network; None: a family
        whose releases are not data, as the matrix's). `mirror` replaces the upstream index; `gate` runs the
        family's gate on this machine and records it as a proof of the rows."""
        ...


@dataclass(frozen=True)
class Proposal:
    """New upstream releases of a family's own package that its data file lacks, and the rows that would serve
    them: `text` is the data file with the rows added (checked: it loads and keeps every row it had), written
    by `faforge bump --write`; `rows` is what is added, as the file spells it; `data` the same for --json."""

    family: str
    path: Path
    releases: tuple[str, ...]
    skipped: tuple[str, ...]  # newer releases not proposed, each with the reason
    rows: str
    text: str
    data: list[dict]


class _HasBump(Protocol):
    @property
    def bump(self) -> BumpFamily: ...


@dataclass(frozen=True)
class TorchSource:
    name: str
    world: str
    channel: str
    package: str
    build: re.Pattern


def load_sources(path: Path) -> dict[str, TorchSource]:
    raw = load_yaml(path)
    if not isinstance(raw, dict) or raw.get("schema") != 1 or not isinstance(raw.get("sources"), dict):
        raise DataError(path, "schema", "expected schema: 1 and a `sources` mapping")
    out = {}
    for name, entry in raw["sources"].items():
        keys = {"world", "channel", "package", "build"}
        if not isinstance(entry, dict) or set(entry) != keys or not all(isinstance(entry[k], str) for k in keys):
            raise DataError(
                path, f"sources.{name}", f"invalid value {entry!r}", hint=f"keys: {', '.join(sorted(keys))}"
            )
        try:
            pattern = re.compile(entry["build"])
        except re.error as exc:
            raise DataError(path, f"sources.{name}.build", f"not a regex: {exc}") from None
        if not ({"cuda", "cuda_dotted"} & set(pattern.groupindex) and {"py", "py_dotted"} & set(pattern.groupindex)):
            raise DataError(path, f"sources.{name}.build", "must capture cuda (or cuda_dotted) and py (or py_dotted)")
        out[name] = TorchSource(
            name=name,
            world=entry["world"],
            channel=entry["channel"].rstrip("/"),
            package=entry["package"],
            build=pattern,
        )
    return out


@dataclass(frozen=True)
class Build:
    torch: str
    cuda: str
    python: str
    subdir: str
    tegra: bool
    url: str


def cuda_and_python(source: TorchSource, build: str) -> tuple[str, str] | None:
    """(CUDA, python) a torch build string names, e.g. ('12.0', '3.13'); None for CPU builds."""
    match = source.build.match(build)
    if not match:
        return None
    groups = match.groupdict()
    cuda = groups.get("cuda_dotted") or cuda_of_tag(groups["cuda"])
    python = groups.get("py_dotted") or f"{groups['py'][0]}.{groups['py'][1:]}"
    return cuda, python


def parse_builds(source: TorchSource, records: Iterable[RepoDataRecord]) -> list[Build]:
    out = []
    for record in records:
        named = cuda_and_python(source, str(record.build))
        if named is None:
            continue  # CPU builds and anything else that is not a CUDA build
        cuda, python = named
        tegra = any(TEGRA.match(str(d)) for d in record.depends)
        out.append(
            Build(
                torch=str(record.version),
                cuda=cuda,
                python=python,
                subdir=str(record.subdir),
                tegra=tegra,
                url=str(record.url),
            )
        )
    return out


def new_releases(table: ReleaseTable, source: TorchSource, builds: list[Build]) -> list[Release]:
    world = table.worlds[source.world]
    have = [r for r in table.releases if r.world == source.world]
    oldest_minor = min((vtuple(r.torch_minor) for r in have), default=(0,))
    groups: dict[tuple[str, str], list[Build]] = defaultdict(list)
    for b in builds:
        groups[(b.torch, b.cuda)].append(b)
    out = []
    for (torch, cuda), group in sorted(groups.items(), key=lambda kv: (vtuple(kv[0][0]), vtuple(kv[0][1]))):
        if vtuple(minor_of(torch)) < oldest_minor:
            continue
        if any(r.cuda == cuda and r.torch_minor == minor_of(torch) and vtuple(r.torch) >= vtuple(torch) for r in have):
            continue
        platforms = tuple(p for p in world.platforms if any(b.subdir == p and not b.tegra for b in group))
        if not platforms:
            continue
        pythons = tuple(sorted({b.python for b in group if not b.tegra}, key=vtuple))
        sources = tuple(min(b.url for b in group if b.subdir == p and not b.tegra) for p in platforms)
        out.append(
            Release(
                world=source.world,
                torch=torch,
                cuda=cuda,
                python=pythons,
                platforms=platforms,
                source=sources,
                tegra=any(b.tegra for b in group),
            )
        )
    return out


def find_new(table: ReleaseTable, source: TorchSource, channel: str | None = None) -> list[Release]:
    """Rows for `source`'s world that its channel has and the table lacks (network: repodata)."""
    if source.world not in table.worlds:
        raise FaforgeError(f"source {source.name} names world {source.world!r}, which {table.path} does not define")
    platforms = list(table.worlds[source.world].platforms)
    records = query(channel or source.channel, [source.package], platforms)
    return new_releases(table, source, parse_builds(source, records))


def extended(table: ReleaseTable, rows: list[Release], pip_rows: Sequence[PipRelease] = ()) -> ReleaseTable:
    return replace(table, releases=table.releases + tuple(rows), pip_releases=table.pip_releases + tuple(pip_rows))


def measured_rows(
    rows: Sequence[Release | PipRelease], philox: PhiloxWidths, policy: BuildPolicy, cache: Path
) -> list[Verdict]:
    """A measured kernel-abi row for each torch minor of `rows` that variants/kernel-abi.yaml lacks,
    from its newest version's wheel (network: the wheel index, the headers unless cached)."""
    newest: dict[str, str] = {}
    for row in rows:
        if row.torch_minor not in philox.by_minor and vtuple(row.torch) > vtuple(newest.get(row.torch_minor, "0")):
            newest[row.torch_minor] = row.torch
    if not newest:
        return []
    files = list_files("torch")
    return [
        measure_release(version, files, cache, policy.flash_attn_version, policy.flash_attn_sha256)
        for _, version in sorted(newest.items(), key=lambda kv: vtuple(kv[0]))
    ]


def with_rows(philox: PhiloxWidths, verdicts: Sequence[Verdict]) -> PhiloxWidths:
    return replace(philox, by_minor={**philox.by_minor, **{v.minor: v.philox_offset_bits for v in verdicts}})


def new_cells(old: ReleaseTable, new: ReleaseTable, policy: BuildPolicy, philox: PhiloxWidths) -> list[Cell]:
    """The cells `new` adds; a new torch minor needs its row in variants/kernel-abi.yaml first (DataError)."""
    before = {c.id for c in build_cells(old, policy, philox)}
    return [c for c in build_cells(new, policy, philox) if c.id not in before]


def new_pip_cells(old: ReleaseTable, new: ReleaseTable, policy: BuildPolicy, philox: PhiloxWidths) -> list[PipCell]:
    """The pip cells `new` adds (a new torch minor's kernel-abi row first, as for new_cells)."""
    before = {c.id for c in build_pip_cells(old, policy, philox)}
    return [c for c in build_pip_cells(new, policy, philox) if c.id not in before]


def write(
    table: ReleaseTable,
    policy: BuildPolicy,
    philox: PhiloxWidths,
    variants_dir: Path,
    recipe_path: Path,
    families: Sequence[_HasBump],
    verdicts: Sequence[Verdict] = (),
) -> list[Path]:
    """Write releases.yaml (canonical form), append the measured kernel-abi rows, and regenerate the
    variant configs (the cells', then each family's own) and the render store.

    The new text is loaded back and turned into cells before anything is replaced, so a table
    that would not load is never written."""
    path = table.path
    old_text = path.read_text()
    text = dump_releases(table, header_of(old_text))
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".releases-", suffix=".yaml", delete=False) as tmp:
        tmp.write(text)
    try:
        reloaded = replace(load_releases(Path(tmp.name)), path=path)
        cells = build_cells(reloaded, policy, philox)
        pip_cells = build_pip_cells(reloaded, policy, philox)
        generated = generated_files(cells, variants_dir, pip_cells=pip_cells)
        for family in families:
            generated |= family.bump.variant_files(reloaded, policy, variants_dir)
        os.replace(tmp.name, path)
    finally:
        if os.path.exists(tmp.name):
            os.unlink(tmp.name)
    written = [path]
    if verdicts:
        abi = philox.path
        atomic.write_text(abi, abi.read_text() + "".join(dump_row(v) for v in verdicts))
        written.append(abi)
    written += _write_stale(generated)
    # The render store's key covers the variant files, so it is computed once they are written.
    return written + _write_stale(store_files(cells, recipe_path, variants_dir, pip_cells))


def _write_stale(expected: dict[Path, str]) -> list[Path]:
    stale = stale_files(expected)
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(expected[path])
    return stale
