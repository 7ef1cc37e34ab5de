"""Demangled C++ names taken apart: the qualified name, the parameter list, the mangled search key.

What classify compares (is a missing symbol's function exported with other parameters, or in the other C++
ABI?), what the doctor names a torch function by and what the torch-free check looks at all start from a
demangled name split here; the judging stays in faforge.abi.classify.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

_SPECIAL = re.compile(
    r"^(?:(?:construction vtable|vtable|VTT|typeinfo name|typeinfo|guard variable|"
    r"TLS init function|TLS wrapper function|reference temporary #\d+) for "
    r"|(?:non-virtual thunk|virtual thunk|covariant return thunk|transaction clone) to )+"
)
_TRAILER = re.compile(r"\)((?: const| volatile| &&| &| noexcept)*)(?: \[clone [^\]]*\])*$")
_ABI_TAG = re.compile(r"\[abi:[^\]]*\]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATOR = re.compile(r"operator(?![A-Za-z0-9_])")
_OPEN, _CLOSE = "<({[", ">)}]"


@dataclass(frozen=True)
class Signature:
    """A demangled name split into its qualified name and parameter list (None for data)."""

    text: str
    qualified_name: str
    parameters: str | None


def parse_signature(text: str) -> Signature:
    body = _SPECIAL.sub("", text)
    trailer = _TRAILER.search(body)
    if not trailer:
        return Signature(text, _strip_return_type(body), None)
    close, depth = trailer.start(), 0
    for i in range(close, -1, -1):
        depth += {")": 1, "(": -1}.get(body[i], 0)
        if depth == 0:
            return Signature(text, _strip_return_type(body[:i]), body[i : close + 1] + trailer.group(1))
    return Signature(text, body, None)


def _top_level(name: str) -> tuple[list[int], list[int], int]:
    """Positions of depth-0 spaces and '::' in `name`, and where a trailing `operator...` starts."""
    spaces: list[int] = []
    scopes: list[int] = []
    depth, i = 0, 0
    while i < len(name):
        c = name[i]
        if (
            depth == 0
            and name.startswith("operator", i)
            and (i == 0 or name[i - 1] in ": ")
            and not name[i + 8 : i + 9].isalnum()
            and name[i + 8 : i + 9] != "_"
        ):
            return spaces, scopes, i
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(0, depth - 1)
        elif depth == 0 and c == " ":
            spaces.append(i)
        elif depth == 0 and name.startswith("::", i):
            scopes.append(i)
            i += 1
        i += 1
    return spaces, scopes, len(name)


def _strip_return_type(name: str) -> str:
    """'void at::foo<float>' -> 'at::foo<float>' (templates print their return type first)."""
    spaces, _, _ = _top_level(name)
    return name[spaces[-1] + 1 :] if spaces else name


def components(qualified_name: str) -> list[str]:
    _, scopes, _ = _top_level(qualified_name)
    bounds = [-2, *scopes, len(qualified_name)]
    return [qualified_name[a + 2 : b] for a, b in itertools.pairwise(bounds)]


def search_key(qualified_name: str) -> str | None:
    """The longest run of mangled source names that every spelling of this function contains.

    'c10::cuda::SetDevice' -> '3c104cuda9SetDevice'. Constructors, destructors and
    operators are mangled as codes (C2, D1, lt), so they contribute only their scope;
    a templated or ABI-tagged component ends the run (its arguments sit between it
    and the next name).
    """
    parts = components(qualified_name)
    key: list[str] = []
    for i in range(len(parts) - 1, -1, -1):
        part = parts[i]
        ident = _ABI_TAG.sub("", part).split("<", 1)[0]
        decorated = ident != part
        if i == len(parts) - 1 and i > 0:
            outer = _ABI_TAG.sub("", parts[i - 1]).split("<", 1)[0]
            if ident in (outer, f"~{outer}") or _OPERATOR.match(part):
                continue
        if not _IDENTIFIER.fullmatch(ident) or ident == "std" or (decorated and key):
            break
        key.insert(0, f"{len(ident)}{ident}")
    return "".join(key) or None


def abi_neutral(text: str) -> str:
    """The same declaration with the C++11 ABI spelling removed, so both ABIs compare equal."""
    text = _ABI_TAG.sub("", text).replace("std::__cxx11::", "std::")
    return text.replace("std::basic_string<char, std::char_traits<char>, std::allocator<char> >", "std::string")
