"""FlashAttention-4's data (variants/flash-attn-4.yaml): the releases served and, per torch minor x CUDA, the
known-good set of every package on FA4's import path, with how far each set is proven.

Every stage of the family reads the file through here: the conda run requirements, the index's wheel metadata,
doctor's diagnosis and the page all come from the same rows, so they cannot disagree."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from faforge.abi.platforms import PLATFORMS
from faforge.datafile import load_yaml
from faforge.errors import DataError
from faforge.family import FLASH_ATTN_4
from faforge.paths import repo_root

LEVELS = ("import-gated", "gpu-proven")
MINOR = re.compile(r"[0-9]+\.[0-9]+")


@dataclass(frozen=True)
class Release:
    version: str
    published: str
    wheel: str
    url: str  # where the wheel is (PyPI's files.pythonhosted.org, or the mirror bump read): the conda recipe's source
    sha256: str
    requires_python: str
    requires: tuple[str, ...]


@dataclass(frozen=True)
class Proof:
    """One gate a set passed: `level` on `platform` with `python`, where (`where`: a GPU's name for gpu-proven,
    the machine otherwise), when, and by what command."""

    level: str
    platform: str
    python: str
    where: str
    date: str
    by: str


@dataclass(frozen=True)
class KnownGoodSet:
    version: str  # the release it is the set of
    torch: str  # the torch minor, "2.11"
    cuda: str  # "13.0"
    python: tuple[str, ...]
    platforms: tuple[str, ...]
    packages: dict[str, str]  # canonical PyPI name -> the gated version
    proofs: tuple[Proof, ...]

    @property
    def id(self) -> str:
        """torch2.11-cu130: the wheel index it is served in (faforge.pipindex.layout)."""
        return f"torch{self.torch}-cu{self.cuda.replace('.', '')}"

    @property
    def local_label(self) -> str:
        """The local version label of its wheel in the index: cu130.torch2.11 (faforge.wheelnames.CUDA_LABEL)."""
        return f"cu{self.cuda.replace('.', '')}.torch{self.torch}"

    @property
    def requires_python(self) -> str:
        """The Requires-Python of its wheel: from the oldest Python it was resolved for."""
        return ">=" + min(self.python, key=lambda v: tuple(int(p) for p in v.split(".")))

    @property
    def level(self) -> str | None:
        """How far it is proven: gpu-proven beats import-gated; None: not gated at all yet."""
        levels = {p.level for p in self.proofs}
        return next((level for level in reversed(LEVELS) if level in levels), None)


@dataclass(frozen=True)
class Fa4Data:
    path: Path
    releases: tuple[Release, ...]
    exact: frozenset[str]  # canonical names pinned with ==
    floor: frozenset[str]  # canonical names pinned with >=
    sets: tuple[KnownGoodSet, ...]

    def set_for(self, torch_minor: str, cuda: str, version: str | None = None) -> KnownGoodSet | None:
        """The set of this torch minor and CUDA (of `version`, default the newest release that has one)."""
        found = [s for s in self.sets if s.torch == torch_minor and s.cuda == cuda]
        if version is not None:
            found = [s for s in found if s.version == version]
        return max(found, key=lambda s: Version(s.version), default=None)

    def requirements(self, kgs: KnownGoodSet) -> list[str]:
        """Its packages as PEP 508 requirements, each by the pin policy of the data file (`pins`)."""
        return [f"{name}{'==' if name in self.exact else '>='}{version}" for name, version in kgs.packages.items()]


def _str(path: Path, key: str, value: object) -> str:
    if isinstance(value, str) and value and len(value) <= 200:
        return value
    raise DataError(path, key, f"{value!r} is not a non-empty string")


def _strs(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise DataError(path, key, f"{value!r} is not a list")
    return tuple(_str(path, f"{key}[{i}]", v) for i, v in enumerate(value))


def _url(path: Path, key: str, value: object, wheel: object) -> str:
    text = _str(path, key, value)
    if not text.startswith(("https://", "http://")) or not text.endswith(f"/{wheel}"):
        raise DataError(path, key, f"{text!r} is not an http(s) URL of {wheel}", hint="copy it from PyPI's page")
    return text


def _version(path: Path, key: str, value: object) -> str:
    text = _str(path, key, value)
    try:
        Version(text)
    except InvalidVersion:
        raise DataError(path, key, f"{text!r} is not a PEP 440 version") from None
    return text


def _mapping(path: Path, key: str, value: object, keys: set[str]) -> dict:
    if not isinstance(value, dict):
        raise DataError(path, key, f"{value!r} is not a mapping")
    unknown = set(value) - keys
    missing = keys - set(value)
    if unknown or missing:
        raise DataError(path, key, f"unknown keys {sorted(map(str, unknown))}, missing {sorted(missing)}")
    return value


def _release(path: Path, key: str, raw: object) -> Release:
    row = _mapping(path, key, raw, {"version", "published", "wheel", "url", "sha256", "requires_python", "requires"})
    sha = _str(path, f"{key}.sha256", row["sha256"])
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise DataError(path, f"{key}.sha256", f"{sha!r} is not a sha256 hex digest")
    return Release(
        version=_version(path, f"{key}.version", row["version"]),
        published=_str(path, f"{key}.published", row["published"]),
        wheel=_str(path, f"{key}.wheel", row["wheel"]),
        url=_url(path, f"{key}.url", row["url"], row["wheel"]),
        sha256=sha,
        requires_python=_str(path, f"{key}.requires_python", row["requires_python"]),
        requires=_strs(path, f"{key}.requires", row["requires"]),
    )


def _proof(path: Path, key: str, raw: object) -> Proof:
    row = _mapping(path, key, raw, {"level", "platform", "python", "where", "date", "by"})
    proof = Proof(**{k: _str(path, f"{key}.{k}", row[k]) for k in row})
    if proof.level not in LEVELS:
        raise DataError(path, f"{key}.level", f"{proof.level!r} is none of {', '.join(LEVELS)}")
    if proof.platform not in PLATFORMS:
        raise DataError(path, f"{key}.platform", f"{proof.platform!r} is none of {', '.join(PLATFORMS)}")
    return proof


def _set(path: Path, key: str, raw: object, releases: set[str]) -> KnownGoodSet:
    row = _mapping(path, key, raw, {"version", "torch", "cuda", "python", "platforms", "packages", "proofs"})
    version = _version(path, f"{key}.version", row["version"])
    if version not in releases:
        raise DataError(path, f"{key}.version", f"{version} is not among `releases`", hint="add its release row")
    for field in ("torch", "cuda"):
        if not MINOR.fullmatch(_str(path, f"{key}.{field}", row[field])):
            raise DataError(path, f"{key}.{field}", f"{row[field]!r} is not a MAJOR.MINOR version")
    pythons = _strs(path, f"{key}.python", row["python"])
    if not pythons or (bad := [p for p in pythons if not MINOR.fullmatch(p)]):
        raise DataError(path, f"{key}.python", f"{row['python']!r} is not a non-empty list of MAJOR.MINOR versions")
    platforms = _strs(path, f"{key}.platforms", row["platforms"])
    if bad := [p for p in platforms if p not in PLATFORMS]:
        raise DataError(path, f"{key}.platforms", f"{bad} are none of {', '.join(PLATFORMS)}")
    raw_packages = row["packages"]
    if not isinstance(raw_packages, dict) or not raw_packages:
        raise DataError(path, f"{key}.packages", "is not a non-empty mapping of package -> version")
    packages = {
        str(canonicalize_name(_str(path, f"{key}.packages", name))): _version(path, f"{key}.packages.{name}", v)
        for name, v in raw_packages.items()
    }
    proofs = row["proofs"]
    if not isinstance(proofs, list):
        raise DataError(path, f"{key}.proofs", f"{proofs!r} is not a list")
    return KnownGoodSet(
        version=version,
        torch=row["torch"],
        cuda=row["cuda"],
        python=pythons,
        platforms=platforms,
        packages=packages,
        proofs=tuple(_proof(path, f"{key}.proofs[{i}]", p) for i, p in enumerate(proofs)),
    )


def load(path: Path | None = None) -> Fa4Data:
    """The data file (default: the repository's), every field checked; a malformed one raises DataError."""
    path = path or repo_root() / FLASH_ATTN_4.data_file
    raw = _mapping(path, "(file)", load_yaml(path), {"schema", "releases", "pins", "sets"})
    if raw["schema"] != 1:
        raise DataError(path, "schema", f"{raw['schema']!r} is not 1", hint="this faforge reads schema 1")
    if not isinstance(raw["releases"], list) or not isinstance(raw["sets"], list):
        raise DataError(path, "releases/sets", "each must be a list")
    releases = tuple(_release(path, f"releases[{i}]", r) for i, r in enumerate(raw["releases"]))
    pins = _mapping(path, "pins", raw["pins"], {"exact", "floor"})
    exact = frozenset(canonicalize_name(n) for n in _strs(path, "pins.exact", pins["exact"]))
    floor = frozenset(canonicalize_name(n) for n in _strs(path, "pins.floor", pins["floor"]))
    sets = tuple(_set(path, f"sets[{i}]", s, {r.version for r in releases}) for i, s in enumerate(raw["sets"]))
    for i, kgs in enumerate(sets):
        if unpinned := sorted(set(kgs.packages) - exact - floor):
            raise DataError(path, f"sets[{i}].packages", f"{unpinned} are in neither pins.exact nor pins.floor")
    keys = [(s.version, s.torch, s.cuda) for s in sets]
    if len(set(keys)) != len(keys):
        raise DataError(path, "sets", "two sets have the same version, torch and cuda")
    return Fa4Data(path, releases, exact, floor, sets)
