"""The build selection (variants/matrix.yaml): which of the existing torch builds we build for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faforge.datafile import load_yaml
from faforge.errors import DataError
from faforge.family import FLASH_ATTN
from faforge.versions import is_constraint, is_version, satisfies

CELL_FIELDS = ("world", "torch", "cuda", "python", "platform")


@dataclass(frozen=True)
class RangeRule:
    """A value chosen by CUDA version, and optionally by torch world: the first rule that matches wins."""

    cuda: str
    value: str
    world: str | None = None  # None: every world


@dataclass(frozen=True)
class Exclusion:
    fields: dict
    reason: str

    def matches(self, **cell: object) -> bool:
        return all(str(cell[k]) == str(v) for k, v in self.fields.items())


@dataclass(frozen=True)
class BuildPolicy:
    path: Path
    flash_attn_version: str
    flash_attn_sha256: str
    build_number: int
    min_python: str  # the floor; the pythons themselves are each torch build's (releases.yaml)
    min_cuda: str
    min_torch: str
    cuda_archs: tuple[RangeRule, ...]
    host_gcc: tuple[RangeRule, ...]
    c_stdlib_version: tuple[RangeRule, ...]
    exclude: tuple[Exclusion, ...]
    # The torch floor of the pip worlds (matrix.yaml `pip.min_torch`); None: min_torch, as for the conda worlds.
    pip_min_torch: str | None = None

    def pick(self, rules_name: str, cuda: str, world: str | None = None) -> str:
        return pick(self.path, rules_name, getattr(self, rules_name), cuda, world)

    def exclusion_for(self, **cell: object) -> Exclusion | None:
        return next((e for e in self.exclude if e.matches(**cell)), None)


def pick(path: Path, name: str, entries: tuple[RangeRule, ...], cuda: str, world: str | None = None) -> str:
    """The value of the first rule of `entries` (the list `name` of `path`) that matches `cuda` and `world`."""
    for rule in entries:
        if rule.world in (None, world) and satisfies(cuda, rule.cuda):
            return rule.value
    where = f" in the {world} world" if world else ""
    raise DataError(
        path, name, f"no rule covers CUDA {cuda}{where}", hint=f"add a `cuda: ...` entry to {name} that matches {cuda}"
    )


def rules(path: Path, raw: dict, name: str, value_key: str, where: str = "") -> tuple[RangeRule, ...]:
    """The list `name` of `raw` as range rules; `where` prefixes the key errors name (a family's section, 'key.')."""
    entries = raw.get(name)
    if not isinstance(entries, list) or not entries:
        raise DataError(path, where + name, f"expected a list of {{cuda: <constraint>, {value_key}: ...}}")
    out = []
    for i, rule in enumerate(entries):
        key = f"{where}{name}[{i}]"
        if not isinstance(rule, dict) or not {"cuda", value_key} <= set(rule) <= {"cuda", value_key, "world"}:
            raise DataError(
                path, key, f"invalid rule {rule!r}", hint=f"expected keys cuda and {value_key}, and optionally world"
            )
        if not isinstance(rule["cuda"], str) or not is_constraint(rule["cuda"]):
            raise DataError(
                path,
                f"{key}.cuda",
                f"invalid constraint {rule['cuda']!r}",
                hint="e.g. '>=12.8' or '>=12.6,<12.8' (quoted)",
            )
        if "world" in rule and not (isinstance(rule["world"], str) and rule["world"]):
            raise DataError(
                path,
                f"{key}.world",
                f"invalid value {rule['world']!r}",
                hint="a torch world of variants/releases.yaml, e.g. conda-forge",
            )
        out.append(RangeRule(cuda=rule["cuda"], value=str(rule[value_key]), world=rule.get("world")))
    return tuple(out)


def _exclusions(path: Path, raw: object) -> tuple[Exclusion, ...]:
    if not isinstance(raw, list):
        raise DataError(path, "exclude", "expected a list (use [] for none)")
    out = []
    for i, entry in enumerate(raw):
        key = f"exclude[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("reason"), str) or not entry["reason"].strip():
            raise DataError(path, key, "each exclusion needs a non-empty `reason`")
        fields = {k: str(v) for k, v in entry.items() if k != "reason"}
        unknown = sorted(set(fields) - set(CELL_FIELDS))
        if unknown or not fields:
            raise DataError(
                path, key, f"invalid cell fields {unknown or '(none)'}", hint=f"use some of {', '.join(CELL_FIELDS)}"
            )
        out.append(Exclusion(fields=fields, reason=entry["reason"]))
    return tuple(out)


def load_policy(path: Path) -> BuildPolicy:
    raw = load_yaml(path)
    if not isinstance(raw, dict) or raw.get("schema") != 1:
        raise DataError(
            path,
            "schema",
            f"invalid value {raw.get('schema') if isinstance(raw, dict) else raw!r}",
            hint="this faforge reads schema 1",
        )
    section = FLASH_ATTN.key
    fa = raw.get(section)
    if not isinstance(fa, dict) or not isinstance(fa.get("version"), str):
        raise DataError(path, f"{section}.version", "missing", hint="e.g. version: 2.8.3.post2")
    sha = str(fa.get("sha256", ""))
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise DataError(
            path,
            f"{section}.sha256",
            f"invalid value {sha!r}",
            hint="the sdist's sha256 from PyPI, 64 lowercase hex digits",
        )
    if not isinstance(fa.get("build_number"), int) or fa["build_number"] < 0:
        raise DataError(
            path, f"{section}.build_number", f"invalid value {fa.get('build_number')!r}", hint="a non-negative integer"
        )
    if "python" in raw:
        raise DataError(
            path,
            "python",
            "a global list of pythons is no longer read: each torch build's pythons are its own "
            "(variants/releases.yaml)",
            hint="remove it; set min_python (e.g. '3.10') for the floor, and exclude: for single pythons",
        )
    for key in ("min_python", "min_cuda", "min_torch"):
        if not isinstance(raw.get(key), str) or not is_version(raw[key]):
            raise DataError(path, key, f"invalid value {raw.get(key)!r}", hint="a quoted version such as '12.0'")
    pip = raw.get("pip", {})
    if not isinstance(pip, dict) or set(pip) - {"min_torch"}:
        raise DataError(
            path,
            "pip",
            f"invalid value {pip!r}",
            hint="a mapping with min_torch (the pip worlds' torch floor), e.g. {min_torch: '2.4'}",
        )
    if "min_torch" in pip and not (isinstance(pip["min_torch"], str) and is_version(pip["min_torch"])):
        raise DataError(
            path, "pip.min_torch", f"invalid value {pip['min_torch']!r}", hint="a quoted version such as '2.4'"
        )
    return BuildPolicy(
        path=path,
        flash_attn_version=fa["version"],
        flash_attn_sha256=sha,
        build_number=fa["build_number"],
        min_python=raw["min_python"],
        min_cuda=raw["min_cuda"],
        min_torch=raw["min_torch"],
        cuda_archs=rules(path, raw, "cuda_archs", "archs"),
        host_gcc=rules(path, raw, "host_gcc", "gcc"),
        c_stdlib_version=rules(path, raw, "c_stdlib_version", "version"),
        exclude=_exclusions(path, raw.get("exclude")),
        pip_min_torch=pip.get("min_torch"),
    )
