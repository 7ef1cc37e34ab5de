"""What of an input file can change a package's behaviour, as bytes for its identity digest.

A build string follows the files a package ships (faforge.matrix.inputs). Digesting their raw bytes made a
comment, a docstring or a reformatting rebuild every kernel package: each is hours of CUDA compiles and a
new file name for every user, for an artifact that behaves the same. So each file enters the digest in a
canonical form that keeps exactly what a reader of the file acts on:

* Python: its syntax tree without docstrings and `pass`, serialised field by field (no line numbers). Comments and
  formatting never reach the tree; fields that are empty or None are left out, so the form is the same on
  every Python from 3.10 up (3.12 added `type_params=[]` to every function).
* YAML and JSON: the data they load to, in document order (a reordered mapping may change an iteration).
* Anything else (C++, CUDA, shell, licences): its bytes. A comment in a compiled source may move a
  `__LINE__` or an assert's text, so it counts.

A file that does not parse is digested as bytes: its build fails anyway, and the digest still follows it.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import yaml

FORM_VERSION = "canonical-1"  # enters every digest: a change of the canonical form changes every identity


def canonical_bytes(path: Path, data: bytes) -> bytes:
    """The behaviour-bearing content of `data`, read from `path` (its suffix picks the form)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".py":
            return _python(data)
        if suffix in (".yaml", ".yml"):
            return _data(yaml.safe_load(data))
        if suffix == ".json":
            return _data(json.loads(data))
    except (SyntaxError, ValueError, yaml.YAMLError, RecursionError):
        pass
    return data


def _data(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), default=str, ensure_ascii=False).encode()


def _python(data: bytes) -> bytes:
    tree = ast.parse(data)
    parts: list[str] = []
    _walk(tree, parts)
    return "".join(parts).encode()


_DOCSTRING_OWNERS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _statements(node: ast.AST, body: list[ast.stmt]) -> list[ast.stmt]:
    """`body` without its docstring and without `pass` (a no-op wherever it stands; a body left with
    nothing but its docstring needs one)."""
    if (
        isinstance(node, _DOCSTRING_OWNERS)
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return [statement for statement in body if not isinstance(statement, ast.Pass)]


def _walk(node: object, out: list[str]) -> None:
    if isinstance(node, ast.AST):
        out.append(type(node).__name__ + "(")
        for name in node._fields:
            value = getattr(node, name, None)
            if name in ("body", "orelse", "finalbody") and isinstance(value, list):
                value = _statements(node, value)
            if value is None or value == []:
                continue
            out.append(name + "=")
            _walk(value, out)
            out.append(",")
        out.append(")")
    elif isinstance(node, list):
        out.append("[")
        for item in node:
            _walk(item, out)
            out.append(",")
        out.append("]")
    else:
        out.append(f"{type(node).__name__}:{node!r}")
