"""Diagnose a Python environment's flash-attn and print the exact fix.

Inspects the current interpreter, or the one at --python (a venv, conda prefix
or system Python): Python, OS, glibc, torch (version, CUDA, C++ ABI, pip or
conda and which channel), GPUs, and flash-attn (version, how it was installed,
what its binary was built for). Imports flash_attn_2_cuda in that interpreter
to capture the real error, runs the ABI gate on the installed binary against
the environment's own torch, states each problem in plain words and gives the
fix: in a conda prefix the conda install spec (or environment.yml); in a venv, uv venv
or system Python the exact `pip install` / `uv pip install` line of its torch's pip cell
from that cell's wheel index ($FAFORGE_PIP_INDEX/torch2.11-cu130/); where no cell fits,
why, the nearest cells and the local-build command.
Other distributions of flash-attn 2's extension (vllm-flash-attn, aphrodite-flash-attn: variants/flash-attn-builds.yaml)
get a section each, diagnosed by the same rules (faforge.doctor.other_builds).
Each other family installed there adds its own section, asked through its `doctor` namespace
(faforge.doctor.sections): what it checks (a stable-ABI claim, its GPU code, its pinned dependencies) is its own.
The probe never runs longer than --timeout (it is stopped with every process it
started, and what it reported until then is diagnosed); stderr says what it waits for.
A pip or uv fix's wheel index is read (bounded by the HTTP read timeout and deadline) to check that it serves
the exact wheel the line installs (faforge.doctor.index_check); --offline skips that.
Exit status: 0 healthy, 1 problems found, 2 bad input, 4 problems found and the index a fix names answered
without its wheel (an index that cannot be reached leaves 1, and the fix says it was not checked).
"""

from __future__ import annotations

import argparse
import json
import sys

# standard library only: cheap at startup
from faforge.doctor.probe_run import PROBE_TIMEOUT_S, probe_timeout, resolve_interpreter
from faforge.errors import EXIT_OK, EXIT_PROBLEMS
from faforge.progress import say


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--python", metavar="PATH", help="interpreter (or environment folder) to inspect; default: this one"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="stop the probe in the interpreter after this long (default: FAFORGE_DOCTOR_TIMEOUT or "
        f"{PROBE_TIMEOUT_S:g} s)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="do not read the wheel index a pip or uv fix names (by default doctor checks it serves the wheel)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print facts, problems and fixes as versioned JSON (schema: tests/schemas/doctor.json)",
    )


def execute(args: argparse.Namespace) -> int:
    # Imported here: the doctor pulls in the ABI gate (pyelftools) and the matrix, which other commands' startup
    # need not pay for.
    from faforge.doctor import index_check, other_builds  # noqa: PLC0415 (the gate and matrix: slow)
    from faforge.doctor.examine import examine  # noqa: PLC0415 (the gate and matrix: slow)
    from faforge.doctor.report import text_lines, to_json  # noqa: PLC0415 (the gate and matrix: slow)
    from faforge.doctor.sections import beside, family_sections  # noqa: PLC0415 (the gate and matrix: slow)
    from faforge.families.registry import FAMILIES  # noqa: PLC0415 (each family's stages: slow)

    timeout, progress = probe_timeout(args.timeout), (lambda message: say(f"faforge doctor: {message}"))
    report = examine(args.python, timeout, progress=progress, offline=args.offline)
    python = resolve_interpreter(args.python)
    sections = family_sections(FAMILIES, python, report.situation.facts, timeout, progress)
    others = [
        other_builds.examine_other(python, b, timeout, progress)
        for b in other_builds.load_builds()
        if b.installed(report.situation.facts)
    ]
    report = beside(report, bool(sections or others))
    healthy = report.healthy and all(s.healthy for _, s in sections) and all(o.healthy for o in others)
    # The diagnosis is printed whole; a fix whose index answered without its wheel adds the error of exit 4.
    error = None if healthy else index_check.blocking_error(report.fixes)
    if args.json:
        json.dump(
            to_json(report)
            | {key: s.to_json() for key, s in sections}
            | ({other_builds.JSON_KEY: [o.to_json() for o in others]} if others else {})
            | ({"error": error.to_json()["error"]} if error else {}),
            sys.stdout,
            indent=2,
        )
        print()
    else:
        print(
            "\n".join(
                text_lines(report)
                + [line for _, s in sections for line in s.text_lines()]
                + [line for o in others for line in other_builds.text_lines(o)]
            )
        )
    if error is not None:
        say(f"faforge doctor: error: {error.line()}")
        return error.exit_code
    return EXIT_OK if healthy else EXIT_PROBLEMS
