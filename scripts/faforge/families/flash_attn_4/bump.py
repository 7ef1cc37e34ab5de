"""flash-attn 4 in `faforge bump` (faforge.release.bump.releases.BumpFamily): upstream ships a beta about
weekly, and each one is data here, a release row and a known-good set per torch minor x CUDA, never code.

proposals() reads PyPI's JSON API for releases newer than the data file's newest (faforge.families.flash_attn_4
.upstream), reads each one's Requires-Dist from its wheel, and re-resolves, for every torch minor x CUDA the data
serves, the set the newest release has there (its package names, Pythons and platforms; a new requirement joins
it) with real uv (.resolve). With `gate` the set is import-gated here (.gate) and the proof recorded; otherwise
its proofs stay empty, as a set nobody has gated. The rows are spelled as the file spells them and added after
the rows it has: the file's own lines are kept byte for byte, and a file whose shape is not the expected one
(top-level keys schema, releases, pins, sets, in that order) is refused rather than rewritten."""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import replace
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from faforge import config
from faforge.errors import DataError, FaforgeError
from faforge.families.flash_attn_4 import gate as import_gate
from faforge.families.flash_attn_4 import sets, upstream
from faforge.families.flash_attn_4.resolve import resolve
from faforge.family import FLASH_ATTN_4
from faforge.matrix.policy import BuildPolicy
from faforge.matrix.releases import ReleaseTable
from faforge.release.bump.releases import Proposal

SHAPE = ["schema", "releases", "pins", "sets"]  # the file's top-level keys, in the order rows are added to them
TOP_KEY = re.compile(r"^([A-Za-z_]+):", re.MULTILINE)


def variant_files(table: ReleaseTable, policy: BuildPolicy, variants_dir: Path) -> dict[Path, str]:
    return {}


def proposals(mirror: str | None, gate: bool) -> Proposal:
    data = sets.load()
    text = data.path.read_text()
    newest = max(data.releases, key=lambda r: Version(r.version))
    url = upstream.page_url(mirror)
    found, skipped = upstream.new_releases(url, upstream.read_page(url), newest.version)
    releases: list[sets.Release] = []
    new_sets: list[sets.KnownGoodSet] = []
    torches: list[str] = []
    for candidate in found:
        meta = upstream.metadata(upstream.fetch_wheel(candidate, wheel_cache()), candidate)
        release = sets.Release(
            version=candidate.version,
            published=candidate.published,
            wheel=candidate.wheel,
            url=candidate.url,
            sha256=candidate.sha256,
            requires_python=meta.requires_python,
            requires=meta.requires,
        )
        releases.append(release)
        for torch_minor, cuda in dict.fromkeys((s.torch, s.cuda) for s in data.sets):
            kgs, torch = propose_set(data, release, torch_minor, cuda, gate)
            new_sets.append(kgs)
            torches.append(torch)
    rows, new_text = added(text, releases, new_sets, torches, data)
    return Proposal(
        family=FLASH_ATTN_4.package,
        path=data.path,
        releases=tuple(r.version for r in releases),
        skipped=tuple(skipped),
        rows=rows,
        text=new_text,
        data=[{"release": r.__dict__ | {"requires": list(r.requires)}} for r in releases]
        + [{"set": _set_data(s) | {"resolved_with_torch": t}} for s, t in zip(new_sets, torches, strict=True)],
    )


def wheel_cache() -> Path:
    return config.cache_dir() / FLASH_ATTN_4.package


def propose_set(
    data: sets.Fa4Data, release: sets.Release, torch_minor: str, cuda: str, gate: bool
) -> tuple[sets.KnownGoodSet, str]:
    """The set of `release` for a torch minor x CUDA (the names, Pythons and platforms of the newest set there),
    and the torch release it was resolved with."""
    previous = data.set_for(torch_minor, cuda)
    assert previous is not None  # the pairs come from the data's own sets
    names = list(previous.packages)
    for line in release.requires:
        name = str(canonicalize_name(Requirement(line).name))
        if name not in names and name not in ("torch", str(canonicalize_name(FLASH_ATTN_4.package))):
            names.append(name)  # a new requirement of upstream's joins the set
    pythons = tuple(p for p in previous.python if SpecifierSet(release.requires_python).contains(p))
    if not pythons:
        raise FaforgeError(
            f"{FLASH_ATTN_4.package} {release.version} requires Python {release.requires_python}, which none of "
            f"{', '.join(previous.python)} (the set of torch {torch_minor}, CUDA {cuda}) is",
            hint="propose its sets by hand, with the Pythons it serves",
        )
    resolved = resolve(release.version, torch_minor, cuda, names, pythons, previous.platforms)
    kgs = sets.KnownGoodSet(
        version=release.version,
        torch=torch_minor,
        cuda=cuda,
        python=pythons,
        platforms=previous.platforms,
        packages=resolved.packages,
        proofs=(),
    )
    if gate:
        kgs = replace(kgs, proofs=(import_gate.run(kgs, resolved.torch, wheel_cache() / release.wheel),))
    return kgs, resolved.torch


def added(
    text: str, releases: list[sets.Release], new_sets: list[sets.KnownGoodSet], torches: list[str], data: sets.Fa4Data
) -> tuple[str, str]:
    """(the rows, the file with them added): release rows after its last release, set rows at its end; refused
    unless the result loads back as the file's rows followed by the new ones."""
    if not releases:
        return "", text
    keys = TOP_KEY.findall(text)
    if keys != SHAPE:
        raise DataError(
            data.path,
            "(file)",
            f"its top-level keys are {keys}, not {SHAPE}: bump adds rows only to that shape",
            hint="add the proposed rows by hand (faforge bump without --write prints them)",
        )
    release_rows = "".join(_release_row(r) for r in releases)
    set_rows = "".join(_set_row(s, t) for s, t in zip(new_sets, torches, strict=True))
    head, pins = text.split("\npins:", 1)
    end = len(head.rstrip("\n")) + 1
    new_text = head[:end] + release_rows + head[end:] + "\npins:" + pins.rstrip("\n") + "\n" + set_rows
    with tempfile.NamedTemporaryFile("w", prefix="fa4-proposed-", suffix=".yaml") as tmp:
        tmp.write(new_text)
        tmp.flush()
        reread = sets.load(Path(tmp.name))
    if reread.releases != data.releases + tuple(releases) or reread.sets != data.sets + tuple(new_sets):
        raise DataError(
            data.path,
            "(file)",
            "with the proposed rows added it would not read back as its rows and the new ones",
            hint="add the proposed rows by hand (faforge bump without --write prints them)",
        )
    return release_rows + set_rows, new_text


def _scalar(value: str, flow: bool = False) -> str:
    """`value` bare where YAML reads it back as that string (4.8.1, linux-64), else double-quoted ("3.10")."""
    try:
        plain = yaml.safe_load(f"- {value}") == [value] and not (flow and set(value) & set(",[]{}"))
    except yaml.YAMLError:
        plain = False
    return value if plain else json.dumps(value)


def _flow(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(_scalar(v, flow=True) for v in values) + "]"


def _release_row(release: sets.Release) -> str:
    lines = [
        f"  - version: {_scalar(release.version)}",
        f"    published: {_scalar(release.published)}",
        f"    wheel: {_scalar(release.wheel)}",
        f"    url: {_scalar(release.url)}",
        f"    sha256: {release.sha256}",
        f"    requires_python: {_scalar(release.requires_python)}",
        "    requires:",
        *(f"      - {_scalar(r)}" for r in release.requires),
    ]
    return "\n".join(lines) + "\n"


def _set_row(kgs: sets.KnownGoodSet, torch: str) -> str:
    lines = [
        f"  # proposed by `faforge bump`: uv pip compile of torch=={torch} and {FLASH_ATTN_4.package}=={kgs.version}",
        f"  - version: {_scalar(kgs.version)}",
        f"    torch: {_scalar(kgs.torch)}",
        f"    cuda: {_scalar(kgs.cuda)}",
        f"    python: {_flow(kgs.python)}",
        f"    platforms: {_flow(kgs.platforms)}",
        "    packages:",
        *(f"      {name}: {_scalar(version)}" for name, version in kgs.packages.items()),
    ]
    if not kgs.proofs:
        return "\n".join([*lines, "    proofs: []"]) + "\n"
    lines.append("    proofs:")
    for proof in kgs.proofs:
        fields = [
            f"{key}: {_scalar(getattr(proof, key))}" for key in ("level", "platform", "python", "where", "date", "by")
        ]
        lines += [f"      - {fields[0]}", *(f"        {f}" for f in fields[1:])]
    return "\n".join(lines) + "\n"


def _set_data(kgs: sets.KnownGoodSet) -> dict:
    return {
        "version": kgs.version,
        "id": kgs.id,
        "python": list(kgs.python),
        "platforms": list(kgs.platforms),
        "packages": kgs.packages,
        "proofs": [p.__dict__ for p in kgs.proofs],
    }
