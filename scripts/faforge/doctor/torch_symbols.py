"""Which torch a binary was built for, read from the torch symbols it imports.

A flash-attn binary never records the torch it was compiled against, but the
mangled names it imports do: `c10::cuda::SetDevice(int)` exists only in torch
2.1-2.2, `(signed char)` in 2.3-2.7, `(signed char, bool)` from 2.8 on. The
table of such spellings is data (variants/torch_symbols.yaml, each range read
from real PyPI wheels); this module loads it, checks it, and intersects the
ranges of the forms a binary imports.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from faforge.datafile import load_yaml
from faforge.errors import DataError
from faforge.matrix.versions import is_version, minor_of, vtuple

_RELEASE = re.compile(r"\d+(?:\.\d+){0,2}")

HEADER = """\
# Mangled torch symbols whose spelling changed between torch releases, and the releases that
# export each spelling. `faforge doctor` matches a flash-attn binary's undefined symbols against
# this table to say which torch it was built for ("built for torch 2.1-2.2"). Hand-edited.
#
# functions: one entry per C++ function; each form is one mangled spelling, exported by `library`
#   in every wheel below from `first` through `last` (null: still exported by the newest wheel).
# wheels: the PyPI files every range was read from (torch/lib/<library> inside each wheel, via
#   HTTP range requests; faforge.wheelfetch). tests/doctor/test_torch_symbols.py re-reads them and
#   fails if any form is exported outside its range or missing inside it. Add the wheel of a new
#   torch release here before extending a range.
"""


@dataclass(frozen=True)
class Form:
    """One mangled spelling of a function and the torch releases that export it."""

    symbol: str
    signature: str
    first: str
    last: str | None  # None: still exported by the newest wheel checked

    def exported_by(self, torch: str) -> bool:
        return vtuple(self.first) <= vtuple(torch) and (self.last is None or vtuple(torch) <= vtuple(self.last))


@dataclass(frozen=True)
class Function:
    function: str
    library: str
    forms: tuple[Form, ...]


@dataclass(frozen=True)
class Wheel:
    torch: str
    file: str
    sha256: str


@dataclass(frozen=True)
class SymbolTable:
    path: Path
    functions: tuple[Function, ...]
    wheels: tuple[Wheel, ...]

    @property
    def newest_checked(self) -> str:
        return max((w.torch for w in self.wheels), key=vtuple)

    def form(self, symbol: str) -> tuple[Function, Form] | None:
        for function in self.functions:
            for form in function.forms:
                if form.symbol == symbol:
                    return function, form
        return None


@dataclass(frozen=True)
class Evidence:
    """One imported symbol that pins the torch range."""

    function: str
    symbol: str
    signature: str
    first: str
    last: str | None


@dataclass(frozen=True)
class BuiltFor:
    """The torch releases whose libraries export every version-specific symbol a binary imports."""

    first: str | None  # None when no imported symbol is in the table
    last: str | None  # None: open-ended (up to the newest torch checked, and maybe later)
    evidence: tuple[Evidence, ...]
    newest_checked: str

    @property
    def known(self) -> bool:
        return bool(self.evidence)

    @property
    def consistent(self) -> bool:
        return self.first is not None and (self.last is None or vtuple(self.first) <= vtuple(self.last))

    def covers(self, torch: str) -> bool:
        return self.consistent and Form("", "", self.first, self.last).exported_by(_release(torch))

    @property
    def words(self) -> str:
        """'torch 2.1-2.2', 'torch 2.8 or newer', 'torch 2.10-2.13'."""
        if not self.known:
            return "an unknown torch (it imports no version-specific torch symbol)"
        if not self.consistent:
            return "no single torch release (its torch symbols come from different releases)"
        first = minor_of(self.first)
        if self.last is None:
            return f"torch {first} or newer (checked through {self.newest_checked})"
        last = minor_of(self.last)
        return f"torch {first}" if first == last else f"torch {first}-{last}"


def _release(version: str) -> str:
    """'2.14.1+cu130' -> '2.14.1', '2.8.0a0+git' -> '2.8.0': local tags and pre-releases do not move the range."""
    match = _RELEASE.match(version)
    return match.group(0) if match else "0"


def built_for(table: SymbolTable, imported: Iterable[str]) -> BuiltFor:
    """Intersect the ranges of every table form among `imported` (a binary's undefined symbols)."""
    evidence = []
    for symbol in sorted(set(imported)):
        found = table.form(symbol)
        if found:
            function, form = found
            evidence.append(Evidence(function.function, form.symbol, form.signature, form.first, form.last))
    if not evidence:
        return BuiltFor(None, None, (), table.newest_checked)
    first = max((e.first for e in evidence), key=vtuple)
    lasts = [e.last for e in evidence if e.last is not None]
    last = min(lasts, key=vtuple) if lasts else None
    return BuiltFor(first, last, tuple(evidence), table.newest_checked)


def offered(table: SymbolTable, function: str, exports: Iterable[str]) -> tuple[Form, ...]:
    """The forms of `function` among a torch library's exported names."""
    names = set(exports)
    return tuple(form for f in table.functions if f.function == function for form in f.forms if form.symbol in names)


# -- loading ------------------------------------------------------------------------------------


def _str(path: Path, key: str, value, *, version: bool = False, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip() or (version and not (is_version(value) and len(vtuple(value)) == 3)):
        raise DataError(path, key, f"invalid value {value!r}",
                        hint="expected a release such as 2.7.1" if version else "expected a non-empty string")
    return value


def _list(path: Path, key: str, value) -> list:
    if not isinstance(value, list) or not value:
        raise DataError(path, key, f"invalid value {value!r}", hint="expected a non-empty list")
    return value


def load_symbol_table(path: Path) -> SymbolTable:
    raw = load_yaml(path)
    if not isinstance(raw, dict) or raw.get("schema") != 1:
        raise DataError(path, "schema", f"invalid value {raw.get('schema') if isinstance(raw, dict) else raw!r}",
                        hint="this faforge reads schema 1")
    wheels = tuple(
        Wheel(_str(path, f"wheels[{i}].torch", w.get("torch"), version=True), _str(path, f"wheels[{i}].file", w.get("file")),
              _str(path, f"wheels[{i}].sha256", w.get("sha256")))
        for i, w in enumerate(_list(path, "wheels", raw.get("wheels")))
    )
    checked = {w.torch for w in wheels}
    functions = []
    for i, f in enumerate(_list(path, "functions", raw.get("functions"))):
        key = f"functions[{i}]"
        forms = []
        for j, form in enumerate(_list(path, f"{key}.forms", f.get("forms"))):
            at = f"{key}.forms[{j}]"
            parsed = Form(_str(path, f"{at}.symbol", form.get("symbol")), _str(path, f"{at}.signature", form.get("signature")),
                          _str(path, f"{at}.first", form.get("first"), version=True),
                          _str(path, f"{at}.last", form.get("last"), version=True, optional=True))
            for bound in ("first", "last"):
                value = getattr(parsed, bound)
                if value is not None and value not in checked:
                    raise DataError(path, f"{at}.{bound}", f"{value} is not among the wheels checked",
                                    hint="every range bound must be a torch release listed under `wheels`")
            forms.append(parsed)
        functions.append(Function(_str(path, f"{key}.function", f.get("function")), _str(path, f"{key}.library", f.get("library")),
                                  tuple(forms)))
    return SymbolTable(path, tuple(functions), wheels)


def dump_symbol_table(table: SymbolTable) -> str:
    """The canonical text of the table (a test asserts the file is in this form)."""
    lines = [HEADER.rstrip("\n"), "schema: 1", "functions:"]
    for f in table.functions:
        lines += [f"- function: {f.function}", f"  library: {f.library}", "  forms:"]
        for form in f.forms:
            lines += [f"  - symbol: {form.symbol}", f"    signature: {form.signature}",
                      f"    first: {form.first}", f"    last: {form.last or 'null'}"]
    lines.append("wheels:")
    for w in table.wheels:
        lines += [f"- torch: {w.torch}", f"  file: {w.file}", f"  sha256: {w.sha256}"]
    return "\n".join(lines) + "\n"


def default_table() -> SymbolTable:
    from faforge import paths  # noqa: PLC0415  (paths needs the checkout; the loader itself does not)

    return load_symbol_table(paths.variants_dir() / "torch_symbols.yaml")
