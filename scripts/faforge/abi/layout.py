"""Silent layout breaks: a type an extension hands to torch whose layout changed between torch releases
while every symbol kept its name (torch::CppFunction at torch 2.9, pytorch/pytorch#160657).

The symbol check cannot see these: the load resolves and then crashes in the extension's static
initialiser. The known breaks are data (layout_breaks.json beside this module, so the recipe's
test-time gate, which ships faforge/abi whole, reads the same table as check-abi and doctor). For each
object of the load that uses a changed type, the torch's side of the boundary is read from the library
that provides the type's entry points (it exports a `built_from` name from the boundary on), and the
binary's side from, first, the torch range its imports date it to (`dating`: doctor's estimate from
variants/torch_symbols.yaml, which check-abi and doctor pass in), then the torch its own distribution pins
(faforge.abi.pins: torchvision's `Requires-Dist: torch (==2.8.0)`), then the row's marks: a binary that
exports torch code of its own yet names no `built_from` symbol was compiled before the boundary (a build
against the boundary's headers emits one beside it); naming one proves nothing (x86_64 torchvision 0.23.0,
built for 2.8, carries c10::KernelFunction::~KernelFunction() too). Sides that differ: a FAILED problem; a
binary whose side does not show: a reason the verdict cannot be told. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from faforge.abi import classify
from faforge.abi.demangle import demangle
from faforge.abi.elf_symbols import DynamicSymbols
from faforge.abi.pins import torch_pin
from faforge.abi.report import Problem
from faforge.abi.resolve import Closure
from faforge.errors import DataError

TABLE = Path(__file__).with_name("layout_breaks.json")
SCHEMA = 1
_FIELDS = ("name", "type", "boundary", "change", "verdict", "uses", "built_from", "sources")
_LISTS = ("uses", "built_from", "sources")


@dataclass(frozen=True)
class LayoutBreak:
    """One known break: the type, the first torch with its new layout, and the evidence to judge a binary by."""

    name: str
    type: str
    boundary: str  # the first torch release with the new layout, e.g. 2.9.0
    change: str
    verdict: str  # what happens to a binary across the boundary, and what to do
    uses: tuple[str, ...]  # imports that show a binary hands the type to torch
    built_from: tuple[str, ...]  # names only binaries (and torch libraries) of the boundary or later carry
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    about: tuple[str, ...]
    breaks: tuple[LayoutBreak, ...]


def load_table(path: Path = TABLE) -> Table:
    """The table with every value checked; an error names the file, the key and the value."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(path, "(file)", f"cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise DataError(path, "(file)", f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict) or raw.get("schema") != SCHEMA:
        raise DataError(
            path,
            "schema",
            f"invalid value {raw.get('schema') if isinstance(raw, dict) else raw!r}",
            hint=f"this faforge reads schema {SCHEMA}",
        )
    breaks = raw.get("breaks")
    if not isinstance(breaks, list) or not breaks:
        raise DataError(path, "breaks", f"invalid value {breaks!r}", hint="expected a non-empty list")
    return Table(_strings(path, "about", raw.get("about")), tuple(_break(path, i, b) for i, b in enumerate(breaks)))


def _strings(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise DataError(path, key, f"invalid value {value!r}", hint="expected a non-empty list of non-empty strings")
    return tuple(value)


def _break(path: Path, i: int, raw: object) -> LayoutBreak:
    key = f"breaks[{i}]"
    if not isinstance(raw, dict) or set(raw) != set(_FIELDS):
        found = sorted(raw) if isinstance(raw, dict) else raw
        raise DataError(path, key, f"invalid value {found!r}", hint=f"expected exactly the keys {', '.join(_FIELDS)}")
    values: dict[str, Any] = {}  # a str or a tuple of them per field, as LayoutBreak declares
    for field in _FIELDS:
        if field in _LISTS:
            values[field] = _strings(path, f"{key}.{field}", raw[field])
        elif not isinstance(raw[field], str) or not raw[field].strip():
            raise DataError(path, f"{key}.{field}", f"invalid value {raw[field]!r}", hint="expected a non-empty string")
        else:
            values[field] = raw[field]
    parts = values["boundary"].split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise DataError(
            path, f"{key}.boundary", f"invalid value {values['boundary']!r}", hint="expected a release such as 2.9.0"
        )
    for field in ("uses", "built_from"):
        bad = [name for name in values[field] if not name.startswith("_Z") or demangle(name) is None]
        if bad:
            raise DataError(
                path, f"{key}.{field}", f"invalid value {bad[0]!r}", hint="expected mangled C++ symbol names"
            )
    return LayoutBreak(**values)


def dump_table(table: Table) -> str:
    """The table's one canonical form (a test asserts the file is in it)."""
    breaks = [
        {field: list(v) if isinstance(v := asdict(b)[field], tuple) else v for field in _FIELDS} for b in table.breaks
    ]
    return (
        json.dumps({"schema": SCHEMA, "about": list(table.about), "breaks": breaks}, indent=2, ensure_ascii=False)
        + "\n"
    )


# The torch releases a binary's imports date it to, (first, last), None where open or unknown.
Dating = Callable[[Sequence[str]], tuple[str | None, str | None]]


@cache
def known_breaks() -> tuple[LayoutBreak, ...]:
    return load_table().breaks


def judge(
    objects: Sequence[tuple[str, DynamicSymbols, Path]],
    closure: Closure,
    breaks: Sequence[LayoutBreak] | None = None,
    *,
    dating: Dating | None = None,
) -> tuple[list[Problem], list[str]]:
    """(problems, reasons the verdict cannot be told) for the objects a load relocates now (the module and
    the helpers it brings in: shown as, symbols, path), against the torch library that provides each
    break's entry points."""
    problems: list[Problem] = []
    untold: list[str] = []
    for brk in known_breaks() if breaks is None else breaks:
        for shown, symbols, path in objects:
            found = _judge_one(brk, shown, symbols, path, closure, dating)
            if isinstance(found, Problem):
                problems.append(found)
            elif found:
                untold.append(found)
    return problems, untold


def _judge_one(
    brk: LayoutBreak, shown: str, symbols: DynamicSymbols, path: Path, closure: Closure, dating: Dating | None
) -> Problem | str | None:
    imported = [s.name for s in symbols.undefined()]
    wanted = set(imported)
    used = [name for name in brk.uses if name in wanted]
    provider = closure.provider(used[0], None) if used else None
    if provider is None:  # not affected, or the entry point is missing (the symbol check reports that)
        return None
    torch_new = any(provider.provides(name, None) for name in brk.built_from)
    release = f"torch {brk.boundary.removesuffix('.0')}"
    torch_side = f"{provider.name} is {release} or later" if torch_new else f"{provider.name} is from before {release}"
    binary_new, evidence = _binary_side(brk, release, symbols, imported, dating, path)
    if binary_new == torch_new:
        return None
    uses = f"it hands torch a {brk.type} ({demangle(used[0])}, provided by {provider.name})"
    change = f"{brk.type}'s layout changed at {release} ({brk.change}; {brk.sources[0]})"
    if binary_new is None:
        return (
            f"{shown}: {uses} and {torch_side}, but which side of {release} it was compiled on does not show "
            f"({evidence}): {change}; if it was built for a torch on the other side, {brk.verdict}"
        )
    compiled = f"{release} or later" if binary_new else f"a torch before {release}"
    detail = f"{uses}; it was compiled against {compiled} ({evidence}), but {torch_side}. {change}, so {brk.verdict}"
    return Problem(classify.LAYOUT_BREAK, used[0], demangle(used[0]), provider.name, detail, imported_by=shown)


def _binary_side(
    brk: LayoutBreak, release: str, symbols: DynamicSymbols, imported: list[str], dating: Dating | None, path: Path
) -> tuple[bool | None, str]:
    """(compiled against the boundary or later: True, before: False, unknown: None; the evidence in words)."""
    boundary = _release(brk.boundary)
    first, last = dating(imported) if dating else (None, None)
    words = f"its torch imports date it to torch {first or '?'}-{last or 'newest'}"
    if first and _release(first) >= boundary:
        return True, words
    if last and _release(last) < boundary:
        return False, words
    pin_first, pin_last = torch_pin(path)
    pinned = f"its distribution requires torch {'==' if pin_first == pin_last else '>='}{pin_first}"
    if pin_first and _release(pin_first) >= boundary:
        return True, pinned
    if pin_last and _release(pin_last) < boundary:
        return False, pinned
    marks = ", ".join(dict.fromkeys(demangle(n) or n for n in brk.built_from))
    names = set(symbols.names)
    if not any(name in names for name in brk.built_from) and any(
        classify.is_torch_mangled(n) for n in symbols.exports()
    ):
        return False, (
            f"it exports torch code of its own but no {marks}, which "
            f"a build against {release} or later carries beside it"
        )
    dated = f"{words}, " if first or last else ""
    if any(name in names for name in brk.built_from):
        return None, f"{dated}and it names {marks}, which builds on both sides may carry"
    return None, f"{dated}and it exports no torch code of its own, so {marks} would be hidden"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("+")[0].split(".")[:3] if p.isdigit())
