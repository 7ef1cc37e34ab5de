"""Run a package's gates and record each result in the verification manifest, keyed by its sha256.

By default the CPU gates: the ABI gate against the torch libraries of the package's cell, and
an import in a clean environment (a fresh venv with the matching PyPI torch wheel, where no conda
channel is reachable). `--gates gpu` runs the GPU suite the same way on a GPU runner. A gate that
cannot run here is recorded as `skipped` with the reason; `publish` never counts that as passed.
A kernel package (libflash-attn-kernels) gets the same gate names with their own meaning (see
faforge.release.verify.gates): abi is the torch-free check against its arch list, import a dlopen with
PyPI's CUDA runtime, gpu the GPU suite through a flash-attn of the same call that pins it. A split
flash-attn's gates need the kernel build it pins: among the PACKAGE arguments, else beside it
(same folder, exact file name), else from --kernel-channel (downloaded into faforge's cache, checked
against the channel's sha256); nowhere is a usage error (exit 2), not a failed gate.
A linux-aarch64 flash-attn on an x86_64 machine: abi natively against --against (the aarch64 torch),
import under qemu (--qemu/$FAFORGE_QEMU or qemu-aarch64 on PATH; --sysroot; --target-python), gpu
skipped: faforge.release.verify.foreign.
A wheel (.whl, the pip world) gets the same gates on PyPI's torch with real pip (faforge.release.verify.wheel_gates):
each kind's gates as its family says them (_description); a linux-aarch64 wheel's import under qemu. Results go
to the same manifest.
Exit status: 0 all passed, 1 a gate failed, 3 none failed but some were skipped.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from faforge import config, paths, progress
from faforge.abi.emulator import check_named
from faforge.channel.repodata import channel_url
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED, FaforgeError, why_not_a_folder
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN
from faforge.release.manifest import parse_gates
from faforge.release.verify.foreign import Emulation
from faforge.release.verify.run import verify_packages
from faforge.table import format_table

CPU_GATES = FLASH_ATTN.gates
VERIFY_VERSION = 1


def _description() -> str:
    """The module's text with each family's wheel kinds' gates, in words, where its wheel paragraph names them."""
    wheels = "; ".join(family.verify.gates_help for family in FAMILIES if family.verify.wheels)
    return (__doc__ or "").replace("each kind's gates as its family says them (_description)", wheels)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.description = _description()
    parser.add_argument(
        "packages",
        nargs="+",
        metavar="PACKAGE",
        help=f".conda files or .whl wheels; a split {FLASH_ATTN.package} (and its glue wheel) needs its kernel "
        "package (kernel wheel) among them or beside it",
    )
    parser.add_argument(
        "--gates",
        default=",".join(CPU_GATES),
        help=f"comma-separated gates to run (default: {','.join(CPU_GATES)}; gpu on a GPU runner)",
    )
    parser.add_argument(
        "--manifest",
        type=Path,
        default=config.DEFAULT_MANIFEST_DIR,
        help=f"where results are recorded (default: ./{config.DEFAULT_MANIFEST_DIR})",
    )
    parser.add_argument(
        "--against",
        type=Path,
        action="append",
        help="check the ABI against this torch (torch/lib, site-packages or prefix) instead of the matching PyPI wheel",
    )
    parser.add_argument(
        "--kernel-channel",
        metavar="URL",
        help=f"where a split {FLASH_ATTN.package}'s kernel package "
        "was published, fetched from there when it is neither "
        "given nor beside it (a cell's job whose kernel package an earlier run published)",
    )
    parser.add_argument(
        "--qemu",
        metavar="PATH",
        help="qemu user-mode emulator for a package of another machine "
        "(default: $FAFORGE_QEMU, else qemu-<machine>[-static] on PATH; an optional external tool)",
    )
    parser.add_argument(
        "--sysroot",
        metavar="DIR",
        help="the target's libc folder for qemu -L and the abi gate "
        "(default: $FAFORGE_SYSROOT, else /usr/<machine>-linux-gnu)",
    )
    parser.add_argument(
        "--target-python",
        metavar="PATH",
        help="that machine's Python, run under qemu by the import gate (default: $FAFORGE_TARGET_PYTHON)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the versioned results (schema: tests/schemas/verify.json)"
    )


def execute(args: argparse.Namespace) -> int:
    gates = parse_gates(args.gates, source="--gates", purpose="nothing would be verified")
    for against in args.against or []:
        with paths.user_path("--against", against):
            if not against.is_dir():
                raise FaforgeError(
                    f"--against {against} {why_not_a_folder(against)}",
                    hint="pass a torch/lib folder, site-packages or prefix",
                )
    paths.output_dir(args.manifest, "--manifest")
    check_named(args.qemu, args.sysroot, args.target_python)
    kernel_channel = (
        None
        if args.kernel_channel is None
        else channel_url(
            args.kernel_channel,
            "--kernel-channel",
            if_empty="name the channel the kernel packages were published to, or leave the option out",
        )
    )

    def done(checked: list) -> None:
        if not args.json:  # each package's table as soon as it is done: a later package's error cannot lose it
            print(
                format_table(
                    ["package", "sha256", "gate", "result", "detail"],
                    [[e.package, e.sha256[:12], e.gate, e.result, e.detail[:100]] for e in checked],
                ),
                flush=True,
            )

    entries = verify_packages(
        args.packages,
        gates,
        manifest=args.manifest,
        against=args.against,
        kernel_channel=kernel_channel,
        report=progress,
        emulation=Emulation(args.qemu, args.sysroot, args.target_python),
        families=[family.verify for family in FAMILIES],
        done=done,
    )
    if args.json:
        print(
            json.dumps(
                {"version": VERIFY_VERSION, "manifest": str(args.manifest), "results": [e.to_json() for e in entries]},
                indent=2,
            )
        )
    else:
        print(f"\nrecorded in {args.manifest}/")
    results = {e.result for e in entries}
    if "failed" in results:
        return EXIT_PROBLEMS
    return EXIT_SKIPPED if "skipped" in results else EXIT_OK
