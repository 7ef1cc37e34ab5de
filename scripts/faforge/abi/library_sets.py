"""Per-torch library sets: a package that ships one torch.ops library per torch release and picks one
at run time by torch.__version__ (torch-c-dlpack-ext's libtorch_c_dlpack_addon_torch{24..29}-{cpu,cuda}.so).

Checking every member against one torch gives false FAILs: all but the one the package loads were
built for other releases. The selection rules are data (variants/torch-library-sets.yaml, each row read
from the package's own loader code); a set that no row describes, or a torch whose release is unknown,
is "cannot tell", never judged member by member.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from faforge.abi import classify
from faforge.abi.report import CANNOT_TELL, OK, PROBLEMS, LibrarySet, Problem, TorchFacts
from faforge.errors import DataError

SETS_FILE = "torch-library-sets.yaml"
IMPORT_ERROR, NO_MEMBER_CANNOT_TELL = "import-error", "cannot-tell"
BUILDS = ("cpu", "cuda")
# A torch release in a file name, when no row knows the file: torch28, torch2.8, torch_2_8, pt28, pt2.10.
TORCH_TOKEN = re.compile(r"(?:torch|(?<![a-z])pt)[-_.]?v?(?P<major>\d)[._]?(?P<minor>\d{1,2})(?!\d)", re.IGNORECASE)
_RELEASE = re.compile(r"^(\d+)\.(\d+)")


@dataclass(frozen=True)
class Rule:
    """One row of the data file: how one package picks its member."""

    package: str
    loader: str
    file: re.Pattern
    devices: dict[str, tuple[str, ...]]
    loads_none_from: tuple[int, int] | None
    no_member: str


@dataclass(frozen=True)
class Member:
    shown: str  # its path in the package
    path: Path
    release: tuple[int, int]
    device: str | None
    name_parts: tuple[str, ...]  # the file name split around release (and device): to name the set and a missing member


@dataclass(frozen=True)
class Choice:
    """A set and the members the package's loader picks for the torch checked against."""

    report: LibrarySet
    loads: tuple[Member, ...]


def split_sets(
    files: list[tuple[str, Path, bool]], torch: TorchFacts, rules: tuple[Rule, ...] | None = None
) -> tuple[list[tuple[str, Path]], list[Choice]]:
    """(the candidates that belong to no set, each set with its choice for `torch`), of `files`: (path in the
    package, file, whether it is a candidate: an extension module or a library that needs torch's). A file a
    row names is a member whatever it holds: the loader opens it by name, so a corrupt one is checked (and
    refused), not taken for a missing one."""
    rules = load_rules() if rules is None else rules
    known: dict[tuple[Path, int], list[Member]] = defaultdict(list)
    unknown: dict[tuple[Path, str], list[Member]] = defaultdict(list)
    rest = []
    for shown, path, candidate in files:
        matched = next(((i, m) for i, r in enumerate(rules) if (m := r.file.match(path.name)) is not None), None)
        if matched is not None:
            row, match = matched
            known[(Path(shown).parent, row)].append(_member(shown, path, match))
        elif not candidate:
            continue
        elif (token := TORCH_TOKEN.search(path.name)) is not None:
            member = _member(shown, path, token)
            unknown[(Path(shown).parent, "\0".join(member.name_parts))].append(member)
        else:
            rest.append((shown, path))
    choices = [choose(rules[row], members, torch) for (_, row), members in known.items()]
    for members in unknown.values():
        if len({m.release for m in members}) < 2:  # one release only: a library like any other
            rest += [(m.shown, m.path) for m in members]
        else:
            choices.append(_unknown(members))
    return rest, sorted(choices, key=lambda c: c.report.files)


def choose(rule: Rule, members: list[Member], torch: TorchFacts) -> Choice:
    """The members `rule`'s loader opens with `torch`, or why that cannot be told or fails."""
    members = sorted(members, key=lambda m: (m.release, m.device or ""))

    def result(verdict: str, detail: str, loads: Sequence[Member] = (), problem: Problem | None = None) -> Choice:
        return Choice(
            LibrarySet(
                _label(members),
                tuple(m.shown for m in members),
                rule.package,
                tuple(m.shown for m in loads),
                verdict,
                detail,
                problem,
            ),
            tuple(loads),
        )

    release = _release(torch.version)
    if release is None:
        return result(
            CANNOT_TELL,
            f"{rule.package} picks one by torch's release, and this torch's release is unknown "
            "(no torch/version.py beside its lib/): check against a torch installation",
        )
    version = torch.version
    if rule.loads_none_from is not None and release >= rule.loads_none_from:
        return result(
            OK,
            f"torch {version} loads none of them ({rule.loader} opens none on torch >= "
            f"{'.'.join(map(str, rule.loads_none_from))})",
        )
    build = "cuda" if torch.cuda else "cpu"
    wanted = rule.devices[build] if rule.devices else (None,)
    loads = [m for m in members if m.release == release and m.device in wanted]
    missing = [d for d in wanted if not any(m.device == d for m in loads)]
    others = len(members) - len(loads)
    if missing:
        name = _member_name(members[0], release, missing[0])
        shown = str(Path(members[0].shown).parent / name)
        have = ", ".join(
            sorted({f"{m.release[0]}.{m.release[1]}" for m in members}, key=lambda v: tuple(map(int, v.split("."))))
        )
        if rule.no_member == IMPORT_ERROR:
            detail = (
                f"{rule.loader} opens {name} on torch {version} ({build} build), and the package has none "
                f"(it has torch {have}): its import fails; install a {rule.package} built for torch "
                f"{release[0]}.{release[1]}, or the torch it was built for"
            )
            return result(PROBLEMS, detail, loads, Problem(classify.MISSING_LIBRARY, None, None, shown, detail))
        return result(
            CANNOT_TELL,
            f"the package has no {name} for torch {version} (it has torch {have}), and what "
            f"{rule.loader} does then is unknown",
        )
    where = " (the cpu one where no GPU is visible)" if build == "cuda" and len(loads) > 1 else ""
    return result(
        OK,
        f"torch {version} ({build} build) loads {', '.join(Path(m.shown).name for m in loads)}{where}; "
        f"the other {others} are never loaded with it and were not checked",
        loads,
    )


def _unknown(members: list[Member]) -> Choice:
    members = sorted(members, key=lambda m: m.release)
    detail = (
        f"{len(members)} libraries that differ only in the torch "
        "release they are for: the package picks one at run time by "
        f"a rule faforge does not know, and checking each against one torch would fail all but one; read the package's "
        f"loader code and add its rule to variants/{SETS_FILE}"
    )
    return Choice(LibrarySet(_label(members), tuple(m.shown for m in members), None, (), CANNOT_TELL, detail, None), ())


def _member(shown: str, path: Path, match: re.Match) -> Member:
    name = path.name
    release = (int(match["major"]), int(match["minor"]))
    device = match.groupdict().get("device")
    cuts = [match.span("major"), match.span("minor")]
    parts = [name[: cuts[0][0]], name[cuts[0][1] : cuts[1][0]]]
    if device is not None:
        start, end = match.span("device")
        parts += [name[cuts[1][1] : start], name[end:]]
    else:
        parts.append(name[cuts[1][1] :])
    return Member(shown, path, release, device, tuple(parts))


def _member_name(like: Member, release: tuple[int, int], device: str | None) -> str:
    p = like.name_parts
    name = f"{p[0]}{release[0]}{p[1]}{release[1]}{p[2]}"
    return name + (f"{device}{p[3]}" if len(p) == 4 and device is not None else "")


def _label(members: list[Member]) -> str:
    """torch_c_dlpack_ext/libtorch_c_dlpack_addon_torch{24,25}-{cpu,cuda}.so: the set in one name."""
    first = members[0]
    p = first.name_parts
    releases = ",".join(dict.fromkeys(f"{m.release[0]}{p[1]}{m.release[1]}" for m in members))
    name = f"{p[0]}{{{releases}}}{p[2]}"
    if len(p) == 4:
        name += "{" + ",".join(dict.fromkeys(m.device for m in members if m.device)) + "}" + p[3]
    return str(Path(first.shown).parent / name)


def _release(version: str | None) -> tuple[int, int] | None:
    match = _RELEASE.match(version or "")
    return (int(match[1]), int(match[2])) if match else None


def load_rules(path: Path | None = None) -> tuple[Rule, ...]:
    """The rows of `path` (default: the checkout's variants/torch-library-sets.yaml), each checked."""
    # Imported here: the recipe's ABI gate ships faforge/abi with the standard library and pyelftools
    # only, and checks one named module, which never asks for the rules.
    from faforge import paths  # noqa: PLC0415  (not in the recipe gate's copy of faforge)

    return _load_rules(path or paths.variants_dir() / SETS_FILE)


@cache
def _load_rules(path: Path) -> tuple[Rule, ...]:
    from faforge.datafile import load_yaml  # noqa: PLC0415  (PyYAML: not in the recipe gate's environment)

    raw = load_yaml(path)
    if not isinstance(raw, dict) or raw.get("schema") != 1:
        raise DataError(path, "schema", "expected schema: 1", hint="this faforge reads schema 1")
    rows = raw.get("sets")
    if not isinstance(rows, list):
        raise DataError(path, "sets", f"invalid value {rows!r}", hint="expected a list of rows")
    return tuple(_rule(path, f"sets[{i}]", row) for i, row in enumerate(rows))


def _rule(path: Path, key: str, row: object) -> Rule:
    if not isinstance(row, dict):
        raise DataError(path, key, f"invalid value {row!r}", hint="expected a mapping")
    for field in ("package", "loader", "file"):
        if not isinstance(row.get(field), str) or not row[field].strip():
            raise DataError(
                path, f"{key}.{field}", f"invalid value {row.get(field)!r}", hint="expected a non-empty string"
            )
    try:
        pattern = re.compile(row["file"])
    except re.error as exc:
        raise DataError(path, f"{key}.file", f"not a regular expression ({exc})") from None
    if not {"major", "minor"} <= pattern.groupindex.keys():
        raise DataError(path, f"{key}.file", "needs the groups (?P<major>...) and (?P<minor>...)")
    devices = row.get("devices") or {}
    has_device = "device" in pattern.groupindex
    if (
        has_device != bool(devices)
        or not isinstance(devices, dict)
        or (devices and set(devices) != set(BUILDS))
        or not all(isinstance(v, list) and v and all(isinstance(d, str) for d in v) for v in devices.values())
    ):
        raise DataError(
            path,
            f"{key}.devices",
            f"invalid value {devices!r}",
            hint="with a (?P<device>...) group: a list of device values "
            "for each of cpu and cuda; without one: leave it out",
        )
    none_from = row.get("loads_none_from")
    if none_from is not None and (not isinstance(none_from, str) or _release(none_from) is None):
        raise DataError(
            path,
            f"{key}.loads_none_from",
            f"invalid value {none_from!r}",
            hint="a torch release such as '2.10', or null",
        )
    if row.get("no_member") not in (IMPORT_ERROR, NO_MEMBER_CANNOT_TELL):
        raise DataError(
            path,
            f"{key}.no_member",
            f"invalid value {row.get('no_member')!r}",
            hint=f"{IMPORT_ERROR} or {NO_MEMBER_CANNOT_TELL}",
        )
    return Rule(
        row["package"],
        row["loader"],
        pattern,
        {b: tuple(v) for b, v in devices.items()},
        _release(none_from) if none_from else None,
        row["no_member"],
    )
