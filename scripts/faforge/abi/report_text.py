"""The ABI gate's verdict in plain words, one line each, for people and CI logs.

faforge.abi.report holds the verdict as data and its versioned JSON form, which tests/schemas fixes; the
words change freely, so they live apart from the shape other tools read.
"""

from __future__ import annotations

from faforge.abi.report import CANNOT_TELL, IMPORT, OK, PROBLEMS, ModuleVerdict, TorchFacts, Verdict


def render_text(verdict: Verdict) -> list[str]:
    """The verdict in plain words, one line each, for people and CI logs."""
    lines = [f"torch: {_torch_words(verdict.torch)}"]
    for library_set in verdict.sets:
        whose = f"{library_set.package}'s rule" if library_set.package else "no known rule"
        lines += [
            f"{library_set.files}: one library per torch release ({len(library_set.members)} files, {whose}):",
            f"  {'missing-library: ' if library_set.problem else ''}{library_set.detail}",
        ]
    for module in verdict.modules:
        lines += _module_lines(module)
    count = sum(len(m.problems) for m in verdict.modules) + sum(1 for s in verdict.sets if s.problem)
    missing = sorted({u.name for m in verdict.modules for u in m.undecided})
    untold = [s.files for s in verdict.sets if s.verdict == CANNOT_TELL]
    layout_untold = [reason for m in verdict.modules for reason in m.untold]
    why = [
        *([f"needs {', '.join(missing)}, found nowhere"] if missing else []),
        *([f"which of {', '.join(untold)} the package loads is unknown"] if untold else []),
        *(["a known layout break may apply"] if layout_untold else []),
    ]
    why = why or ["the package loads none of its libraries with this torch: nothing was checked"]
    status = {
        OK: "OK",
        PROBLEMS: f"FAILED ({count} problem{'s' if count != 1 else ''})",
        CANNOT_TELL: f"CANNOT TELL ({'; '.join(why)})",
    }[verdict.verdict]
    lines.append(f"{status}: {verdict.extension} against {', '.join(verdict.against)}")
    if verdict.verdict == CANNOT_TELL and layout_untold:
        lines += [f"  {reason}" for reason in layout_untold]
    if verdict.verdict == CANNOT_TELL and missing:
        lines.append(
            f'  a bare load of the module fails on {", ".join(missing)} ("cannot open shared object file"), and what '
            "that library imports, torch's symbols among them, was not checked: install it, pass its folder with "
            "--library-dir, or check the package as it is installed"
        )
    return lines


def _abi_words(abi: int | None) -> str:
    return "C++ ABI unknown (no std::string in its symbols)" if abi is None else f"_GLIBCXX_USE_CXX11_ABI={abi}"


def _torch_words(torch: TorchFacts) -> str:
    version = torch.version or "unknown version"
    cuda = f", CUDA {torch.cuda}" if torch.cuda else ""
    return (
        f"{version}{cuda}, {torch.machine or 'unknown machine'}, "
        f"{_abi_words(torch.cxx11_abi)} in {', '.join(torch.lib_dirs)}"
    )


def _module_lines(module: ModuleVerdict) -> list[str]:
    d = module.declared
    gpu = ", ".join([*d.gpu.sass, *(f"PTX {p}" for p in d.gpu.ptx)]) or "none (CPU only)"
    versions = ", ".join(d.newest_versions.values()) or "none"
    how = (
        ""
        if module.loaded_by == IMPORT
        else " (a library its package loads itself after `import torch`: torch.ops.load_library, ctypes)"
    )
    lines = [
        f"{module.path}{how}:",
        f"  built for: {d.machine} ({d.elf_class}-bit), {_abi_words(d.cxx11_abi)}",
        f"  GPU code: {gpu}",
        f"  needs at least: {versions}",
        f"  loads {len(module.libraries)} libraries; "
        f"{module.interpreter_symbols} symbols come from the Python interpreter",
    ]
    for lib in module.libraries:
        if lib.beside_module:
            lines.append(
                f"  taken from beside the module: {lib.name} ({lib.path}): "
                "no search path finds it, so the package must "
                "load it first, as torchaudio's and torchtext's own code do; checked as loaded first"
            )
    for u in module.unverified_libraries:
        whose = " (torch's own; `import torch` loads it or fails first)" if u.by_torch else ""
        lines.append(f"  unverified: {u.name} (needed by {u.needed_by}){whose}: {u.reason}")
    if module.unresolved_unverified:
        lines.append(
            f"  unverified: {module.unresolved_unverified} symbols are not in the libraries found; "
            "they may come from the unverified ones"
        )
    for p in module.problems:
        subject = p.demangled or p.symbol or p.library
        if subject is None:  # nothing to name but the finding itself (the --platform check)
            lines.append(f"  {p.kind}: {p.detail}")
            continue
        lines.append(f"  {p.kind}: {subject}")
        if p.symbol and p.demangled and p.demangled != p.symbol:
            lines.append(f"    symbol: {p.symbol}")
        if p.imported_by and p.imported_by != module.path:
            lines.append(f"    imported by: {p.imported_by} (a library this load brings in)")
        lines.append(f"    {p.detail}")
    return lines
