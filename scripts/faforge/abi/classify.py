"""Judge what is wrong: name the C++ ABI of a binary, explain a missing symbol, compare versions.

Reading is done by faforge.abi.elf, finding libraries by faforge.abi.resolve (ld_search, library);
this module only interprets names.  A missing symbol is explained by looking
for exports of the *same qualified function* in the libraries:
  * the same signature once the C++11 ABI spelling is normalised away -> abi-mismatch;
  * the same qualified name with other parameters -> signature-drift
    (c10::cuda::SetDevice(int) vs SetDevice(signed char, bool));
  * nothing -> missing-symbol.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from faforge.abi.demangle import demangle
from faforge.abi.report import Problem
from faforge.abi.signature import abi_neutral, parse_signature

MISSING_LIBRARY = "missing-library"
ABI_MISMATCH = "abi-mismatch"
SIGNATURE_DRIFT = "signature-drift"
MISSING_SYMBOL = "missing-symbol"
WRONG_ARCHITECTURE = "wrong-architecture"
GLIBC_TOO_NEW = "glibc-too-new"
# Every symbol resolves, but a type handed to torch has another layout there (faforge.abi.layout).
LAYOUT_BREAK = "layout-break"
KINDS = (
    MISSING_LIBRARY,
    ABI_MISMATCH,
    SIGNATURE_DRIFT,
    MISSING_SYMBOL,
    WRONG_ARCHITECTURE,
    GLIBC_TOO_NEW,
    LAYOUT_BREAK,
)

# -- the C++11 ABI, from mangled names ------------------------------------------------------
# New ABI (_GLIBCXX_USE_CXX11_ABI=1): std::__cxx11 types (`St7__cxx11`) and the [abi:cxx11] tag (`B5cxx11`).
# Old ABI (=0): `Ss` is the abbreviation of std::string, which the new ABI never uses.
NEW_ABI_MARKERS = ("St7__cxx11", "B5cxx11")
OLD_ABI_MARKER = "Ss"
_SOURCE_NAME = re.compile(r"(?<![0-9])([1-9][0-9]*)")
ABI_NAMES: dict[int | None, str] = {
    0: "pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0, std::string mangled `Ss`)",
    1: "C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1, std::__cxx11::basic_string)",
}


def abi_of_name(name: str) -> int | None:
    """1 or 0 when this one mangled name shows which std::string it uses, else None."""
    if not name.startswith("_Z"):
        return None
    if any(marker in name for marker in NEW_ABI_MARKERS):
        return 1
    if OLD_ABI_MARKER in name and OLD_ABI_MARKER in _without_identifiers(name):
        return 0
    return None


def _without_identifiers(name: str) -> str:
    """The mangled name minus its <length><identifier> source names, so `3Ssl` is not read as `Ss`."""
    out, i = [], 0
    for match in _SOURCE_NAME.finditer(name):
        if match.start() < i:
            continue
        out.append(name[i : match.start()])
        i = match.end() + int(match.group(1))
    out.append(name[i:])
    return "".join(out)


def cxx11_abi_counts(names: Iterable[str]) -> tuple[int, int]:
    """(names showing the old ABI, names showing the C++11 ABI): `abi_of_name` over all names, with
    plain substring searches over one joined text picking out the few candidates."""
    text = "\n".join(names)
    new = {start: line for marker in NEW_ABI_MARKERS for start, line in lines_containing(text, marker).items()}
    old = lines_containing(text, OLD_ABI_MARKER)
    return (
        sum(1 for start, line in old.items() if start not in new and abi_of_name(line) == 0),
        sum(1 for line in new.values() if line.startswith("_Z")),
    )


def lines_containing(text: str, fragment: str) -> dict[int, str]:
    """The lines of `text` that contain `fragment`, keyed by where they start (str.find runs in C)."""
    lines, at = {}, 0
    while (at := text.find(fragment, at)) >= 0:
        start, end = text.rfind("\n", 0, at) + 1, text.find("\n", at)
        lines[start] = text[start : end if end >= 0 else len(text)]
        if end < 0:
            break
        at = end
    return lines


def cxx11_abi_of(names: Iterable[str]) -> int | None:
    """The _GLIBCXX_USE_CXX11_ABI a binary was compiled with, from its dynamic symbol names.

    None when no name involves std::string (then the ABI cannot be told and does not
    matter for linking). When both spellings occur (libstdc++ exports both), the majority wins.
    """
    old, new = cxx11_abi_counts(names)
    if old == new:
        return None
    return 1 if new > old else 0


# torch's own API: mangled names nested in its namespaces (`_ZN3c10`, `_ZNK2at`, ...), and the same
# namespaces demangled. How these functions spell std::string is the ABI torch was compiled with;
# the std:: names torch exports (statically linked libstdc++ pieces, `std::__cxx11::basic_string`
# members in every pre-C++11 PyPI torch) are not evidence (measured: libtorch.so and libc10.so of
# torch 2.1-2.6 export more std::__cxx11 names than `Ss` ones, yet c10::Error(SourceLocation,
# std::string) is `_ZN3c105ErrorC2ENS_14SourceLocationESs` there).
TORCH_NAMESPACES = ("c10", "at", "torch", "caffe2")
_TORCH_MANGLED = re.compile(r"^_ZN[KVRO]*(?:" + "|".join(f"{len(n)}{n}" for n in TORCH_NAMESPACES) + ")")
_TORCH_DEMANGLED = re.compile(r"^(?:" + "|".join(TORCH_NAMESPACES) + ")::")


def is_torch_mangled(name: str) -> bool:
    """Whether a mangled name is nested in torch's namespaces."""
    return bool(_TORCH_MANGLED.match(name))


def torch_cxx11_abi(exports: Iterable[str]) -> int | None:
    """The _GLIBCXX_USE_CXX11_ABI torch was compiled with, from a torch library's exported names:
    only its own API (c10::, at::, torch::, caffe2::) counts."""
    return cxx11_abi_of(name for name in exports if is_torch_mangled(name))


def is_torch_api(demangled: str | None) -> bool:
    """Whether a demangled name is in torch's namespaces, so only a torch library can provide it."""
    return demangled is not None and bool(_TORCH_DEMANGLED.match(parse_signature(demangled).qualified_name))


# -- explaining problems ------------------------------------------------------------------------


def explain_missing(symbol: str, library_hint: str | None, candidates: Iterable[tuple[str, str]]) -> Problem:
    """Classify one unresolved symbol, given exports that share its search key as (name, library)."""
    wanted = demangle(symbol)
    if wanted is None:
        return Problem(MISSING_SYMBOL, symbol, None, library_hint, "not exported by any library it loads")
    sig = parse_signature(wanted)
    same_abi_neutral, same_name = [], []
    for name, library in candidates:
        if name == symbol:
            continue
        offered = demangle(name)
        if offered is None:
            continue
        other = parse_signature(offered)
        if abi_neutral(offered) == abi_neutral(wanted):
            same_abi_neutral.append((name, offered, library))
        elif (
            sig.parameters is not None
            and other.parameters is not None
            and abi_neutral(other.qualified_name) == abi_neutral(sig.qualified_name)
        ):
            same_name.append((name, offered, library))
    if same_abi_neutral:
        name, offered, library = same_abi_neutral[0]
        mine, theirs = abi_of_name(symbol), abi_of_name(name)
        detail = (
            f"{library} has this function only in the {ABI_NAMES.get(theirs, 'other C++ ABI')}; "
            f"the binary was built with the {ABI_NAMES.get(mine, 'other C++ ABI')}"
        )
        return Problem(ABI_MISMATCH, symbol, wanted, library, detail, tuple(o for _, o, _ in same_abi_neutral))
    if same_name:
        library = same_name[0][2]
        offers = tuple(sorted({o for _, o, _ in same_name}))
        detail = (
            f"the binary wants {wanted}, but {library} offers {'; '.join(offers)}: "
            "it was built against another torch version"
        )
        return Problem(SIGNATURE_DRIFT, symbol, wanted, library, detail, offers)
    return Problem(MISSING_SYMBOL, symbol, wanted, library_hint, "not exported by any library it loads")


# -- symbol versions --------------------------------------------------------------------------
_VERSION = re.compile(r"^([A-Z]+)_(\d+(?:\.\d+)*)$")
RUNTIME_VERSION_PREFIXES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC")


def parse_version(name: str) -> tuple[str, tuple[int, ...]] | None:
    """'GLIBC_2.28' -> ('GLIBC', (2, 28)); None for names like 'libcudart.so.13'."""
    match = _VERSION.match(name)
    if not match:
        return None
    return match.group(1), tuple(int(x) for x in match.group(2).split("."))


def newest_versions(names: Iterable[str]) -> dict[str, str]:
    """The highest required version per prefix: {'GLIBC': 'GLIBC_2.28', 'GLIBCXX': 'GLIBCXX_3.4.29'}."""
    best: dict[str, tuple[tuple[int, ...], str]] = {}
    for name in names:
        parsed = parse_version(name)
        if (
            parsed
            and parsed[0] in RUNTIME_VERSION_PREFIXES
            and (parsed[0] not in best or parsed[1] > best[parsed[0]][0])
        ):
            best[parsed[0]] = (parsed[1], name)
    return {prefix: name for prefix, (_, name) in sorted(best.items())}


def glibc_above(names: Iterable[str], limit: tuple[int, ...]) -> list[str]:
    """Required GLIBC_ versions newer than `limit` (the target sysroot's glibc), oldest first."""
    found = [(parsed[1], name) for name in names if (parsed := parse_version(name)) and parsed[0] == "GLIBC"]
    return [name for version, name in sorted(found) if version > limit]
