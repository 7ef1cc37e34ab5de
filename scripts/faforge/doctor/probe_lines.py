"""Read the marked lines probe.py prints in the target interpreter, without trusting them.

The target interpreter is the user's, and so is everything it runs before and around the probe (a
sitecustomize, a `.pth` file, a torch that is not torch): a marked line may be no JSON, nest without
end, or lack a key faforge.doctor.facts reads or hold another type there. Each is one error naming the
interpreter and the key (exit 2, as an interpreter that does not run the probe at all), never a
traceback. The JSON is read strictly by faforge.untrusted; the shape of each stage is STAGES below,
the keys faforge.doctor.facts reads with the types probe.py writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faforge.errors import FaforgeError
from faforge.untrusted import parse_json

if TYPE_CHECKING:
    from typing import TypeAlias

    # A spec (see below): a type, None (null), a dict of keys, or an Of.
    Spec: TypeAlias = "type | dict[str, Spec] | Of | None"

MARK = "@@faforge-probe@@"
HINT = (
    "pass the python of the environment to inspect; a sitecustomize or .pth file there that prints on stdout "
    "or replaces json can garble the probe's lines"
)


@dataclass(frozen=True)
class Of:
    """A compound spec: `kind` "one of" (`item`: a tuple of specs), "list", "pair" (a list of two) or
    "map" (an object whose keys are free) of `item`."""

    kind: str
    item: Any  # a spec, or for "one of" a tuple of specs


def optional(spec: Spec) -> Of:
    return Of("one of", (spec, None))


# A spec is a type (str, bool, int), None (null), a dict of keys (a trailing "?": the key may be
# missing; other keys are ignored), or an Of.
ERROR: dict[str, Spec] = {"type": str, "message": str}
TEXTS = Of("list", str)
ENV: dict[str, Spec] = {
    "python": {
        "executable": str,
        "version": str,
        "implementation": str,
        "prefix": str,
        "soabi?": optional(str),
        "ext_suffix?": optional(str),
        "externally_managed?": bool,
        "venv?": optional(Of("map", str)),
        "pip?": bool,
    },
    "system": {"os": str, "machine": str, "glibc?": optional(str), "ld_library_path?": TEXTS},
    "site_dirs?": TEXTS,
    "conda?": optional(
        Of("list", {"name": str, "version": str, "build": str, "channel": str, "dist_infos?": TEXTS, "depends?": TEXTS})
    ),
    "distributions?": Of(
        "list",
        {
            "name": str,
            "path": str,
            "site": str,
            "version?": optional(str),
            "installer?": optional(str),
            "direct_url?": optional(str),
            "cuda_runtime?": optional(str),
        },
    ),
    "unreadable_metadata?": Of("list", {"path": str, "reason": str}),
    "torch_package?": optional(str),
    "extension?": optional(str),
    "extension_files?": TEXTS,
}
TORCH: dict[str, Spec] = {
    "imported": bool,
    "version?": optional(str),
    "cuda?": optional(str),
    "cxx11_abi?": optional(int),
    "cuda_available?": bool,
    "devices?": Of("list", {"name": str, "capability": Of("pair", int)}),
    "error?": optional(ERROR),
    "cuda_error?": optional(ERROR),
}
IMPORT: dict[str, Spec] = {"ok": bool, "error?": optional(ERROR)}
STAGES = {"env": ENV, "torch": TORCH, "import": IMPORT}
JSON_WORDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
    type(None): "null",
}
OF_WORDS = {"list": "a list", "pair": "a list of two", "map": "an object"}


class Misfit(ValueError):
    """Where a value breaks its spec, and how."""


def _word(spec: Spec) -> str:
    if spec is None:
        return "null"
    if isinstance(spec, dict):
        return "an object"
    if isinstance(spec, Of):
        return " or ".join(_word(s) for s in spec.item) if spec.kind == "one of" else OF_WORDS[spec.kind]
    return JSON_WORDS[spec]


def _fits(value: object, spec: Spec) -> bool:
    """Whether `value` has the outer type of `spec` (what is inside is checked by check)."""
    if spec is None:
        return value is None
    if isinstance(spec, dict):
        return isinstance(value, dict)
    if isinstance(spec, Of):
        if spec.kind == "one of":
            return any(_fits(value, s) for s in spec.item)
        return (
            isinstance(value, dict)
            if spec.kind == "map"
            else isinstance(value, list) and (spec.kind == "list" or len(value) == 2)
        )
    return type(value) is spec  # bool is no int here, nor int a bool


def check(value: Any, spec: Spec, where: str) -> None:
    """Raise Misfit naming `where` (a dotted path) if `value` does not fit `spec`."""
    if not _fits(value, spec):
        raise Misfit(f"{where} is {JSON_WORDS.get(type(value), 'something else')}, not {_word(spec)}")
    if isinstance(spec, dict):
        for key, inner in spec.items():
            name = key.rstrip("?")
            if name in value:
                check(value[name], inner, f"{where}.{name}")
            elif not key.endswith("?"):
                raise Misfit(f"{where}.{name} is missing")
    elif isinstance(spec, Of) and spec.kind == "one of":
        check(value, next(s for s in spec.item if _fits(value, s)), where)
    elif isinstance(spec, Of) and spec.kind == "map":
        for key, item in value.items():
            check(item, spec.item, f"{where}.{key[:40]}")
    elif isinstance(spec, Of):
        for index, item in enumerate(value):
            check(item, spec.item, f"{where}[{index}]")


def read_line(line: str, python: Path, seen: dict) -> tuple[str, dict] | None:
    """(stage, its facts) of a marked line of the probe, checked; None for any other line. `seen`: the
    stages read so far (a stage printed twice is not the probe's doing)."""
    if not line.startswith(MARK):
        return None
    label = f"--python {python}: a line of faforge's probe"
    data = parse_json(line[len(MARK) :], label, hint=HINT)
    try:
        check(data, {"stage": str}, "the line")
        stage = data.pop("stage")
        if stage not in STAGES:
            raise Misfit(f"its stage {stage[:40]!r} is none of {', '.join(STAGES)}")
        if stage in seen:
            raise Misfit(f"its stage {stage!r} came twice")
        check(data, STAGES[stage], stage)
    except Misfit as exc:
        raise FaforgeError(f"{label} is not what the probe prints: {exc}", hint=HINT) from None
    return stage, data
