"""Doctor's rules about flash-attn's extension file: present, for this Python, this machine, this
glibc and C++ runtime, this C++ ABI, and this torch's symbols."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from faforge.abi import classify
from faforge.abi.demangle import demangle
from faforge.doctor.situation import ERROR, PACKAGE_MISSING, WARNING, Problem, Situation
from faforge.doctor.torch_symbols import built_for_one
from faforge.family import FLASH_ATTN

if TYPE_CHECKING:
    from faforge.abi.report import Problem as GateProblem
    from faforge.doctor.binary import BinaryFacts

ABI_WORDS: dict[int | None, str] = {
    0: "the pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0)",
    1: "the C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1)",
}
# How many of a signature drift's symbols its details spell out; the evidence lists them all.
DETAILED_SYMBOLS = 5


def flash_attn_missing(s: Situation) -> Problem | None:
    if s.facts.extension or s.facts.extension_files:
        return None
    if s.flash_attn.installed:
        return Problem(
            PACKAGE_MISSING,
            ERROR,
            f"{FLASH_ATTN.package} {s.flash_attn.version} is installed ({s.flash_attn.how}) but its extension "
            f"{FLASH_ATTN.extension}*.so is not on sys.path; the install is incomplete",
        )
    return Problem(PACKAGE_MISSING, ERROR, f"{FLASH_ATTN.package} is not installed in this environment")


def python_tag_mismatch(s: Situation) -> Problem | None:
    py = s.facts.python
    wanted = (py.ext_suffix or "").removesuffix(".so").lstrip(".")
    if s.facts.extension is None and s.facts.extension_files:
        names = ", ".join(f.rsplit("/", 1)[-1] for f in s.facts.extension_files)
        return Problem(
            "python-tag-mismatch",
            ERROR,
            f"{FLASH_ATTN.package}'s extension is built for another Python ({names}); this interpreter is "
            f"{py.implementation} {py.version} and loads only *.{wanted}.so",
            evidence={"files": list(s.facts.extension_files), "expected_tag": wanted},
        )
    if s.claim and s.claim.python and s.claim.python != py.minor:
        return Problem(
            "python-tag-mismatch",
            ERROR,
            f"{FLASH_ATTN.package}'s {s.claim.source} says Python {s.claim.python} "
            f"({s.claim.text}); this interpreter is Python {py.version}",
        )
    return None


def wrong_architecture(s: Situation) -> Problem | None:
    found = s.gate_problems(classify.WRONG_ARCHITECTURE)
    if not found or s.binary is None:  # gate problems come from a binary
        return None
    return Problem(
        "wrong-architecture",
        ERROR,
        f"{FLASH_ATTN.package}'s binary is built for "
        f"{s.binary.module.declared.machine}; this machine is {s.facts.system.machine}",
        tuple(p.detail for p in found),
    )


def _version_problems(s: Situation, prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """(required version, detail) for runtime-library versions the loader or the gate could not satisfy."""
    found = [(p.symbol, p.detail) for p in s.gate_problems(classify.GLIBC_TOO_NEW)]
    missing, error = s.facts.import_outcome.missing_version, s.facts.import_outcome.error
    if missing and error and missing not in {v for v, _ in found}:  # missing is read from the error
        found.append((missing, error.message))
    return [(v, d) for v, d in found if (parsed := classify.parse_version(v)) and parsed[0] in prefixes]


def glibc_too_old(s: Situation) -> Problem | None:
    found = _version_problems(s, ("GLIBC",))
    if not found:
        return None
    releases = {v: parsed[1] for v, _ in found if (parsed := classify.parse_version(v))}
    newest = max(releases, key=releases.__getitem__)
    return Problem(
        "glibc-too-old",
        ERROR,
        f"{FLASH_ATTN.package}'s binary needs glibc {newest.split('_', 1)[1]} "
        f"({newest}); this system has glibc {s.facts.system.glibc}",
        tuple(d for _, d in found),
        {"required": newest, "system": s.facts.system.glibc},
    )


def libstdcxx_too_old(s: Situation) -> Problem | None:
    found = _version_problems(s, ("GLIBCXX", "CXXABI", "GCC"))
    if not found:
        return None
    return Problem(
        "libstdcxx-too-old",
        ERROR,
        f"{FLASH_ATTN.package}'s binary needs a newer C++ runtime "
        f"than the one loaded here ({', '.join(v for v, _ in found)})",
        tuple(d for _, d in found),
    )


def cxx11_abi_mismatch(s: Situation) -> Problem | None:
    if s.binary is None or s.facts.import_outcome.ok:
        return None
    mine = s.binary.module.declared.cxx11_abi
    # Only a torch that imported says its ABI; a static guess about a broken torch is no cause.
    theirs = s.torch_abi if s.facts.torch.imported else None
    gate = s.gate_problems(classify.ABI_MISMATCH)
    symbol = s.facts.import_outcome.undefined_symbol
    if not gate and (mine is None or theirs is None or mine == theirs):
        return None
    if mine is None and symbol:
        mine = classify.abi_of_name(symbol)
    details = [f"undefined symbol: {symbol}"] if symbol else []
    details += [f"{p.demangled or p.symbol}: {p.detail}" for p in gate[:3]]
    if s.claim and s.claim.cxx11_abi is not None and mine is not None and s.claim.cxx11_abi != mine:
        details.append(
            f"its {s.claim.source} ({s.claim.text}) claims cxx11abi {'TRUE' if s.claim.cxx11_abi else 'FALSE'}, "
            "but the binary says otherwise (upstream's FLASH_ATTENTION_FORCE_CXX11_ABI=FALSE did not force ABI 0)"
        )
    return Problem(
        "cxx11-abi-mismatch",
        ERROR,
        f"{FLASH_ATTN.package} was built with {ABI_WORDS.get(mine, 'another C++ ABI')}; "
        f"your {s.torch_words} uses {ABI_WORDS.get(theirs, 'the other one')}",
        tuple(details),
        {"binary_cxx11_abi": mine, "torch_cxx11_abi": theirs},
    )


def _importer(binary: BinaryFacts, problem: GateProblem | None) -> str:
    """Who imports a missing symbol: the extension, or a library its load brings in (a helper taken from
    beside the module is named, as the ABI gate's load model found it)."""
    by = problem.imported_by if problem is not None else None
    if not by or by == binary.module.path:
        return "it"
    beside = any(lib.beside_module and lib.path == by for lib in binary.module.libraries)
    return (
        f"its library {Path(by).name} ({'beside the module, loaded first' if beside else 'which its load brings in'})"
    )


def signature_drift(s: Situation) -> Problem | None:
    """Built against another torch. The stated range is the cause only when it excludes the user's
    torch; a range that contains it is never called a mismatch, and the symbol the import
    failed on leads."""
    if s.binary is None or not s.import_failed:
        return None
    symbol = s.facts.import_outcome.undefined_symbol
    gate = sorted(s.gate_problems(classify.SIGNATURE_DRIFT, classify.MISSING_SYMBOL), key=lambda p: p.symbol != symbol)
    built = s.binary.built_for
    in_table = symbol is not None and any(e.symbol == symbol for e in built.evidence)
    if not gate and not in_table:
        return None
    torch_release = s.torch_version
    in_range = bool(built.known and torch_release and built.covers(torch_release))
    if in_range and not gate:
        return None
    lacking = [e for e in built.evidence if torch_release and not built_for_one(e).covers(torch_release)]
    lacking.sort(key=lambda e: e.symbol != symbol)
    stated = built.known and built.consistent and bool(lacking)
    by_gate = {p.symbol: p for p in gate}
    signatures = {e.symbol: e.signature for e in lacking}
    # Every symbol the user's torch lacks, the one the message names first: the table's (which date
    # the binary) and the gate's (which the table may not know), so the count, the evidence and the
    # details agree.
    lead = lacking[0].symbol if stated else (gate[0].symbol if gate else symbol)
    symbols = list(dict.fromkeys([lead, *(e.symbol for e in lacking), *(p.symbol for p in gate)]))
    more = len(symbols) - 1
    more_words = f" and {more} more symbol{'s' if more > 1 else ''} your torch lacks" if more else ""
    if stated:
        offers = sorted({sig for e in lacking for sig in s.binary.torch_offers.get(e.function, ())})
        message = (
            f"this {FLASH_ATTN.package} was built for {built.words} (it imports {lacking[0].signature}{more_words})"
        )
        message += (
            f"; your {s.torch_words} exports {'; '.join(offers)}"
            if offers
            else f"; your {s.torch_words} does not export it"
        )
    else:
        first = gate[0] if gate else None
        wanted = (first.demangled or first.symbol) if first else (demangle(symbol) or symbol)
        message = (
            f"this {FLASH_ATTN.package} was built against another torch: {_importer(s.binary, first)} "
            f"imports {wanted}, which your {s.torch_words} does not export"
        )
        if first and first.offers:
            message += f" (it offers {'; '.join(first.offers)})"
        message += f",{more_words}" if more else ""
    drifted = {p.symbol for p in gate} | {e.symbol for e in built.evidence}
    details = [f"undefined symbol: {symbol}"] if symbol in drifted else []
    for name in symbols[:DETAILED_SYMBOLS]:
        found = by_gate.get(name)
        kind, spelled = (found.kind, found.demangled) if found else (classify.SIGNATURE_DRIFT, signatures.get(name))
        details.append(f"{kind}: {name} = {spelled}" if spelled else f"{kind}: {name}")
    if len(symbols) > DETAILED_SYMBOLS:
        details.append(
            f"and {len(symbols) - DETAILED_SYMBOLS} more: `faforge doctor --json` lists all {len(symbols)} "
            "in this problem's evidence.symbols"
        )
    if s.claim and s.claim.torch_minor:
        details.append(f"its {s.claim.source} says torch {s.claim.torch_minor} ({s.claim.text})")
    return Problem(
        "signature-drift",
        ERROR,
        message,
        tuple(details),
        {
            "built_for": {"first": built.first, "last": built.last} if stated else None,
            "torch": torch_release,
            "symbols": symbols,
        },
    )


def layout_break(s: Situation) -> Problem | None:
    """Every symbol resolves, yet the import crashes: a type the extension hands torch has another layout
    in this torch (faforge.abi.layout's table, the one check-abi and the recipe's gate read). Only when the
    import did not succeed, the ground truth; a binary whose side of the boundary does not show is named
    as the possible cause, not the certain one."""
    if s.binary is None or not s.import_failed:
        return None
    found = s.gate_problems(classify.LAYOUT_BREAK)
    if found:
        return Problem(
            "layout-break",
            ERROR,
            f"{FLASH_ATTN.package}'s binary was built for a torch on the other side of a layout change "
            f"from your {s.torch_words}: it registers its operators with {found[0].demangled}, "
            "and its load aborts although every symbol resolves",
            tuple(p.detail for p in found),
            {"symbols": [p.symbol for p in found]},
        )
    untold = s.binary.module.untold
    if untold:
        return Problem(
            "layout-break",
            WARNING,
            f"{FLASH_ATTN.package}'s binary may have been built for a torch on the other side of a layout "
            f"change from your {s.torch_words}; its symbols do not show which",
            untold,
        )
    return None
