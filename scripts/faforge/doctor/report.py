"""The doctor's report as versioned JSON (tests/schemas/doctor.json) and as lines of text.

Bump REPORT_VERSION when a field is removed or changes meaning; adding fields is compatible.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from faforge.doctor.examine import Report
from faforge.doctor.facts import Gpu
from faforge.doctor.index_check import SERVED, blocked
from faforge.doctor.installs import (
    CONDA,
    EXTERNALLY_MANAGED,
    SYSTEM,
    UV_VENV,
    VENV,
    Install,
    environment_kind,
)
from faforge.doctor.situation import ERROR, Situation
from faforge.family import FLASH_ATTN

if TYPE_CHECKING:
    from faforge.doctor.fix_commands import Fix

REPORT_VERSION = 1
ABI_SHORT = {0: "pre-C++11 ABI", 1: "C++11 ABI", None: "C++ ABI unknown"}
ENVIRONMENT_WORDS = {
    CONDA: "conda prefix",
    UV_VENV: "uv venv",
    VENV: "venv",
    EXTERNALLY_MANAGED: "externally managed (PEP 668) prefix",
    SYSTEM: "prefix",
}


def _gpu(gpu: Gpu) -> dict:
    cap = gpu.capability
    return {
        "name": gpu.name,
        "capability": f"{cap[0]}.{cap[1]}" if cap else None,
        "sm": f"sm_{cap[0]}{cap[1]}" if cap else None,
        "driver": gpu.driver,
        "seen_by": gpu.seen_by,
    }


def _install(install: Install) -> dict:
    record = install.conda_record
    return {
        "installed": install.installed,
        "how": install.how,
        "version": install.version,
        "origin": install.origin,
        "location": install.distribution.path if install.distribution else None,
        "conda": {"name": record.name, "version": record.version, "build": record.build, "channel": record.channel_name}
        if record
        else None,
        "shadowed": [d.path for d in install.others],
    }


def _binary(s: Situation) -> dict | None:
    b = s.binary
    if b is None:
        return None
    declared = b.module.declared
    return {
        "path": b.path,
        "so_tag": b.so_tag,
        "machine": declared.machine,
        "cxx11_abi": declared.cxx11_abi,
        "gpu": {"sass": list(declared.gpu.sass), "ptx": list(declared.gpu.ptx)},
        "newest_versions": dict(declared.newest_versions),
        "cudart_majors": list(b.cudart_majors),
        "built_for": {
            "first": b.built_for.first,
            "last": b.built_for.last,
            "words": b.built_for.words,
            "evidence": [asdict(e) for e in b.built_for.evidence],
        },
        "torch_offers": {k: list(v) for k, v in sorted(b.torch_offers.items())},
    }


def facts_json(s: Situation) -> dict:
    f = s.facts
    rt = f.torch
    outcome = f.import_outcome
    return {
        "python": {
            "executable": f.python.executable,
            "version": f.python.version,
            "implementation": f.python.implementation,
            "abi_tag": f.python.soabi,
            "ext_suffix": f.python.ext_suffix,
            "prefix": f.python.prefix,
            "conda_prefix": f.conda is not None,
            "environment": environment_kind(f),
            "venv": f.python.venv,
            "pip": f.python.pip,
        },
        "system": {
            "os": f.system.os,
            "machine": f.system.machine,
            "platform": f.system.platform,
            "glibc": f.system.glibc,
        },
        "torch": {
            **_install(s.torch),
            "imported": rt.imported,
            "runtime_version": rt.version,
            "cuda": rt.cuda,
            "cxx11_abi": s.torch_abi,
            "cuda_available": rt.cuda_available,
            "import_error": asdict(rt.error) if rt.error else None,
        },
        "gpus": [_gpu(g) for g in f.gpus] or [_gpu(g) for g in rt.devices],
        "nvidia_smi": f.nvidia_smi,
        FLASH_ATTN.key: {
            **_install(s.flash_attn),
            "claim": asdict(s.claim) if s.claim else None,
            "extension": f.extension,
            "extension_files": list(f.extension_files),
            "binary": _binary(s),
            "binary_error": s.binary_error,
        },
        "import": {
            "ok": outcome.ok,
            "error": asdict(outcome.error) if outcome.error else None,
            "crashed": outcome.crashed,
        },
        "abi_gate": s.binary.verdict.to_json() if s.binary else None,
    }


def to_json(report: Report) -> dict:
    return {
        "version": REPORT_VERSION,
        "healthy": report.healthy,
        "python": report.situation.facts.python.executable,
        "facts": facts_json(report.situation),
        "problems": [
            {
                "kind": p.kind,
                "severity": p.severity,
                "message": p.message,
                "details": list(p.details),
                "evidence": p.evidence,
            }
            for p in report.problems
        ],
        "fixes": [
            {
                "kind": x.kind,
                "title": x.title,
                "commands": list(x.commands),
                "environment_yml": x.environment_yml,
                "cell": x.cell,
                "build_string": x.build_string,
                "index_url": x.index_url,
                "index_check": x.index_check.to_json() if x.index_check else None,
                "resolves": list(x.resolves),
                "notes": list(x.notes),
            }
            for x in report.fixes
        ],
    }


# -- text ---------------------------------------------------------------------------------------------


def _torch_line(s: Situation) -> str:
    rt = s.facts.torch
    if not s.torch.installed and not rt.imported:
        return "not installed"
    if not rt.imported:
        return f"{s.torch.version or '?'} ({s.torch.how}); import fails: {rt.error.type if rt.error else '?'}"
    cuda = f"CUDA {rt.cuda}" if rt.cuda else "CPU only"
    return f"{rt.version}, {cuda}, {ABI_SHORT[s.torch_abi]}, from {s.torch.how}: {s.torch.origin}"


def _flash_lines(s: Situation) -> list[str]:
    fa = s.flash_attn
    if not fa.installed and not s.facts.extension_files:
        return [f"{FLASH_ATTN.package:<11} not installed"]
    lines = [f"{FLASH_ATTN.package:<11} {fa.version or '?'} from {fa.how}: {fa.origin}"]
    if s.claim:
        c = s.claim
        said = [
            f"Python {c.python}" if c.python else None,
            f"torch {c.torch_minor}" if c.torch_minor else None,
            f"CUDA {c.cuda}" if c.cuda else None,
            ABI_SHORT[c.cxx11_abi] if c.cxx11_abi is not None else None,
        ]
        lines.append(f"            its {c.source} says: built for {', '.join(x for x in said if x)}")
    b = s.binary
    if b is not None:
        d = b.module.declared
        gpu = ", ".join([*d.gpu.sass, *(f"PTX {p}" for p in d.gpu.ptx)]) or "none"
        cudart = ", ".join(f"libcudart.so.{m}" for m in b.cudart_majors) or "no libcudart"
        lines += [
            f"            {b.path}",
            f"            binary: {d.machine}, {ABI_SHORT[d.cxx11_abi]}, {cudart}, GPU code {gpu}",
            f"            built for {b.built_for.words}",
        ]
    elif s.binary_error:
        lines.append(f"            binary unreadable: {s.binary_error}")
    return lines


def _index_check_lines(fix: Fix) -> list[str]:
    check = fix.index_check
    if check is None:
        return []
    if check.status == SERVED:
        return [f"     index check: ok, {check.message}"]
    if check.blocks:
        return [
            f"     index check: FAILED, this line cannot install: {check.message}",
            f"     what to do: {check.hint}",
        ]
    return [f"     index check: {check.message}" + (f" ({check.hint})" if check.hint else "")]


def text_lines(report: Report) -> list[str]:
    s = report.situation
    f = s.facts
    gpus = (
        ", ".join(
            f"{g.name} (sm_{g.capability[0]}{g.capability[1]})" if g.capability else g.name
            for g in (f.gpus or f.torch.devices)
        )
        or f"none visible (nvidia-smi: {f.nvidia_smi})"
    )
    driver = next((g.driver for g in f.gpus if g.driver), None)
    outcome = f.import_outcome
    if outcome.ok:
        imported = "ok"
    elif outcome.crashed:
        imported = f"crashed ({outcome.crashed})"
    else:
        imported = f"FAILED {outcome.error.type}: {outcome.error.message}" if outcome.error else "not attempted"
    lines = [
        f"faforge doctor: {f.python.executable}",
        f"python      {f.python.version} ({f.python.soabi}), "
        f"{ENVIRONMENT_WORDS[environment_kind(f)]} {f.python.prefix}",
        f"system      {f.system.os} {f.system.machine}, glibc {f.system.glibc or '?'}",
        f"torch       {_torch_line(s)}",
        f"GPU         {gpus}" + (f", driver {driver}" if driver else ""),
        *_flash_lines(s),
        f"import      {FLASH_ATTN.extension}: {imported}",
        "",
    ]
    if not report.problems:
        lines.append("No problems found.")
    else:
        lines.append("Problems:")
        for p in report.problems:
            lines.append(f"  [{p.severity}] {p.kind}: {p.message}")
            lines += [f"      {d}" for d in p.details]
    if report.fixes:
        lines += ["", "Fix:"]
        for i, x in enumerate(report.fixes, 1):
            lines.append(f"  {i}. {x.title}")
            lines += [f"       $ {c}" for c in x.commands]
            if x.index_url:
                lines.append(f"     index: {x.index_url}")
            lines += _index_check_lines(x)
            if x.environment_yml:
                lines.append("     environment.yml:")
                lines += [f"       {line}" for line in x.environment_yml.splitlines()]
            lines += [f"     note: {n}" for n in x.notes]
    errors = sum(1 for p in report.problems if p.severity == ERROR)
    lines += ["", "healthy" if report.healthy else f"{errors} problem{'s' if errors != 1 else ''} found"]
    if blocked(report.fixes):
        lines.append("and the wheel index a fix names does not serve its wheel (see `index check` above)")
    return lines
