"""Run FlashAttention-4's probe (faforge.families.flash_attn_4.probe) in the interpreter to inspect, and read what
it printed without trusting it.

It runs as doctor's own probe does (faforge.doctor.probe_run: under the warden, bounded in time, each stream
capped), and its marked lines are read as doctor's are: strict JSON (faforge.untrusted), each stage checked
against its spec (faforge.doctor.probe_lines.check); a line that breaks them is one error naming the interpreter,
never a traceback. Every version must be PEP 440 and every text short, or it is refused the same way.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from faforge.abi.emulator import interpreter_command
from faforge.doctor.facts import ImportOutcome, ProbeError
from faforge.doctor.probe_lines import ERROR, HINT, MARK, Misfit, Of, check, optional
from faforge.doctor.probe_run import _run_bounded
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN_4
from faforge.untrusted import parse_json

if TYPE_CHECKING:
    from faforge.doctor.probe_lines import Spec

PROBE = Path(__file__).with_name("probe.py")
TEXT_CAP = 4096  # a path, a version or a message's last line: longer is not what the probe prints
STAGES: dict[str, dict[str, Spec]] = {
    "fa4-dists": {
        "versions": Of("map", optional(str)),
        "namespace": {"init": optional(str), "paths": Of("list", str)},
    },
    "fa4-import": {"ok": bool, "error?": optional({**ERROR, "where": str})},
}


@dataclass(frozen=True)
class Fa4Facts:
    versions: dict[str, str | None]  # each asked distribution -> its version, None where not installed
    init: str | None  # flash_attn/__init__.py where flash-attn 2 owns the package; None: a namespace package
    paths: tuple[str, ...]  # the folders `flash_attn` spans
    import_outcome: ImportOutcome
    where: str | None  # file:line of the frame the import failed in


def collect(python: Path, dists: tuple[str, ...], timeout_s: float, progress: Callable[[str], None]) -> Fa4Facts:
    """The probe's facts about `dists` and the import, from `python`."""
    stages: dict[str, dict] = {}
    label = f"--python {python}: a line of {FLASH_ATTN_4.package}'s probe"

    def on_line(line: str | None) -> None:
        if line is None:
            progress(f"waiting for `import {FLASH_ATTN_4.module}` in {python} (up to {timeout_s:g} s)")
        else:
            stage, data = read_line(line, label, stages)
            stages[stage] = data

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    command = [*interpreter_command(python), "-", FLASH_ATTN_4.module, FLASH_ATTN_4.namespace, *dists]
    with tempfile.TemporaryDirectory(prefix="faforge-doctor-") as cwd:  # keep the cwd off the target's sys.path
        try:
            ended = _run_bounded(command, PROBE.read_text(), timeout_s, on_line, cwd=cwd, env=env)
        except OSError as exc:
            raise FaforgeError(f"--python {python}: cannot run it: {exc.strerror or exc}", hint=HINT) from None
    stopped = ended.stopped or (None if ended.code == 0 else f"it ended with exit code {ended.code}")
    return facts_of(stages, dists, stopped, python)


def read_line(line: str, label: str, seen: dict) -> tuple[str, dict]:
    """(stage, its data) of one marked line, checked; FaforgeError (exit 2) for anything the probe does not print."""
    data = parse_json(line[len(MARK) :], label, hint=HINT)
    try:
        check(data, {"stage": str}, "the line")
        stage = data.pop("stage")
        if stage not in STAGES or stage in seen:
            raise Misfit(f"its stage {stage[:40]!r} is none of {', '.join(STAGES)} or came twice")
        check(data, STAGES[stage], stage)
        _short(data, stage)
    except Misfit as exc:
        raise FaforgeError(f"{label} is not what the probe prints: {exc}", hint=HINT) from None
    return stage, data


def _short(value: object, where: str) -> None:
    """Every text at most TEXT_CAP characters but an error's message (cut to its last line when read)."""
    if isinstance(value, str) and len(value) > TEXT_CAP and not where.endswith(".message"):
        raise Misfit(f"{where} has {len(value)} characters, more than {TEXT_CAP}")
    if isinstance(value, dict):
        for key, item in value.items():
            _short(item, f"{where}.{str(key)[:40]}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _short(item, f"{where}[{index}]")


def facts_of(stages: dict[str, dict], dists: tuple[str, ...], stopped: str | None, python: Path) -> Fa4Facts:
    """The typed facts; a stage the probe did not reach (a crash, the deadline) is a fact of its own."""
    label = f"--python {python}: a line of {FLASH_ATTN_4.package}'s probe"
    found = stages.get("fa4-dists")
    if found is None:
        raise FaforgeError(
            f"--python {python}: {FLASH_ATTN_4.package}'s probe printed no facts ({stopped or 'no output'})",
            hint=HINT,
        )
    versions = found["versions"]
    if missing := [d for d in dists if d not in versions]:
        raise FaforgeError(f"{label} is not what the probe prints: fa4-dists.versions lacks {missing[0]}", hint=HINT)
    for name in dists:
        if versions[name] is not None:
            try:
                Version(versions[name])
            except InvalidVersion:
                raise FaforgeError(
                    f"{label} is not what the probe prints: the version of {name}, {versions[name][:80]!r}, "
                    "is not PEP 440",
                    hint=HINT,
                ) from None
    imported = stages.get("fa4-import")
    error = (imported or {}).get("error")
    if imported is None:
        outcome = ImportOutcome(ran=True, crashed=stopped or "no result")
    else:
        last = (error["message"].strip().splitlines() or [""])[-1][:TEXT_CAP] if error else ""
        outcome = ImportOutcome(ran=True, ok=imported["ok"], error=ProbeError(error["type"], last) if error else None)
    return Fa4Facts(
        {d: versions[d] for d in dists},
        found["namespace"]["init"],
        tuple(found["namespace"]["paths"]),
        outcome,
        (error or {}).get("where") or None,
    )
