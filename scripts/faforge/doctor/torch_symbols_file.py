"""variants/torch_symbols.yaml as a SymbolTable: load it with every value checked, and write it back
in its one canonical form (a test asserts the file is in that form).

Apart from the matching (faforge.doctor.torch_symbols) because the file's schema, its header and
its error messages change for reasons of their own.
"""

from __future__ import annotations

from pathlib import Path

from faforge.datafile import load_yaml
from faforge.doctor.torch_symbols import ExportRange, Form, Function, SymbolTable, Wheel
from faforge.errors import DataError
from faforge.family import FLASH_ATTN
from faforge.versions import is_version, vtuple

HEADER = f"""\
# Mangled torch symbols whose spelling changed between torch releases, and the releases that
# export each spelling. `faforge doctor` matches a {FLASH_ATTN.package} binary's undefined symbols against
# this table to say which torch it was built for ("built for torch 2.1-2.2"). Hand-edited.
#
# functions: one entry per C++ function; each form is one mangled spelling, exported by `library`
#   in every wheel below from `first` through `last` (null: still exported by the newest wheel).
# wheels: the PyPI files every range was read from (torch/lib/<library> inside each wheel, via
#   HTTP range requests; faforge.wheelfetch). tests/doctor/test_torch_symbols.py re-reads them and
#   fails if any form is exported outside its range or missing inside it. Add the wheel of a new
#   torch release here before extending a range.
# exports: GENERATED, do not edit: every symbol in torch's namespaces (c10::, at::, torch::) that
#   `library` exports in some of the wheels below and not in others, with no std::string in its name
#   (that spelling is the C++ ABI, a question of its own), grouped by the releases exporting it
#   (first..last, contiguous; null: still in the newest wheel). Regenerate after changing `wheels`:
#   FAFORGE_UPDATE_TORCH_SYMBOLS=1 pytest tests/doctor/test_torch_symbols.py -m slow -k exports
"""


def _str(path: Path, key: str, value: object, *, version: bool = False) -> str:
    if (
        not isinstance(value, str)
        or not value.strip()
        or (version and not (is_version(value) and len(vtuple(value)) == 3))
    ):
        raise DataError(
            path,
            key,
            f"invalid value {value!r}",
            hint="expected a release such as 2.7.1" if version else "expected a non-empty string",
        )
    return value


def _optional_str(path: Path, key: str, value: object, *, version: bool = False) -> str | None:
    return None if value is None else _str(path, key, value, version=version)


def _list(path: Path, key: str, value: object) -> list:
    if not isinstance(value, list) or not value:
        raise DataError(path, key, f"invalid value {value!r}", hint="expected a non-empty list")
    return value


def load_symbol_table(path: Path) -> SymbolTable:
    raw = load_yaml(path)
    if not isinstance(raw, dict) or raw.get("schema") != 1:
        raise DataError(
            path,
            "schema",
            f"invalid value {raw.get('schema') if isinstance(raw, dict) else raw!r}",
            hint="this faforge reads schema 1",
        )
    wheels = tuple(
        Wheel(
            _str(path, f"wheels[{i}].torch", w.get("torch"), version=True),
            _str(path, f"wheels[{i}].file", w.get("file")),
            _str(path, f"wheels[{i}].sha256", w.get("sha256")),
        )
        for i, w in enumerate(_list(path, "wheels", raw.get("wheels")))
    )
    checked = {w.torch for w in wheels}
    functions = []
    for i, f in enumerate(_list(path, "functions", raw.get("functions"))):
        key = f"functions[{i}]"
        forms = []
        for j, form in enumerate(_list(path, f"{key}.forms", f.get("forms"))):
            at = f"{key}.forms[{j}]"
            parsed = Form(
                _str(path, f"{at}.symbol", form.get("symbol")),
                _str(path, f"{at}.signature", form.get("signature")),
                _str(path, f"{at}.first", form.get("first"), version=True),
                _optional_str(path, f"{at}.last", form.get("last"), version=True),
            )
            _check_bounds(path, at, parsed, checked)
            forms.append(parsed)
        functions.append(
            Function(
                _str(path, f"{key}.function", f.get("function")),
                _str(path, f"{key}.library", f.get("library")),
                tuple(forms),
            )
        )
    exports = []
    for i, e in enumerate(raw.get("exports") or []):
        key = f"exports[{i}]"
        entry = ExportRange(
            _str(path, f"{key}.library", e.get("library")),
            _str(path, f"{key}.first", e.get("first"), version=True),
            _optional_str(path, f"{key}.last", e.get("last"), version=True),
            tuple(
                _str(path, f"{key}.symbols[{j}]", s)
                for j, s in enumerate(_list(path, f"{key}.symbols", e.get("symbols")))
            ),
        )
        _check_bounds(path, key, entry, checked)
        exports.append(entry)
    return SymbolTable(path, tuple(functions), wheels, tuple(exports))


def _check_bounds(path: Path, key: str, entry: Form | ExportRange, checked: set[str]) -> None:
    for bound in ("first", "last"):
        value = getattr(entry, bound)
        if value is not None and value not in checked:
            raise DataError(
                path,
                f"{key}.{bound}",
                f"{value} is not among the wheels checked",
                hint="every range bound must be a torch release listed under `wheels`",
            )


def dump_symbol_table(table: SymbolTable) -> str:
    """The canonical text of the table (a test asserts the file is in this form)."""
    lines = [HEADER.rstrip("\n"), "schema: 1", "functions:"]
    for f in table.functions:
        lines += [f"- function: {f.function}", f"  library: {f.library}", "  forms:"]
        for form in f.forms:
            lines += [
                f"  - symbol: {form.symbol}",
                f"    signature: {form.signature}",
                f"    first: {form.first}",
                f"    last: {form.last or 'null'}",
            ]
    lines.append("wheels:")
    for w in table.wheels:
        lines += [f"- torch: {w.torch}", f"  file: {w.file}", f"  sha256: {w.sha256}"]
    if table.exports:
        lines.append("exports:")
    for e in table.exports:
        lines += [f"- library: {e.library}", f"  first: {e.first}", f"  last: {e.last or 'null'}", "  symbols:"]
        lines += [f"  - {symbol}" for symbol in e.symbols]
    return "\n".join(lines) + "\n"


def default_table() -> SymbolTable:
    from faforge import paths  # noqa: PLC0415  (paths needs the checkout; the loader itself does not)

    return load_symbol_table(paths.variants_dir() / "torch_symbols.yaml")
