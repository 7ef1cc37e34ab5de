"""Pack a pip wheel from what the conda and backend builds made, without compiling anything again.

Each KIND is a family's (faforge.pipwheel.kinds.WheelKind, listed by its `verify` namespace): the options it
takes, its usage line in `faforge wheel --help` and how it is packed.
Each wheel's platform tag is the manylinux level its ELF files need, by auditwheel's policy (faforge.pipwheel).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from faforge import paths
from faforge.errors import EXIT_OK, FaforgeError
from faforge.families.registry import FAMILIES
from faforge.family import FLASH_ATTN
from faforge.pipwheel.built import BuiltWheel
from faforge.pipwheel.kinds import WheelKind
from faforge.progress import step

WHEEL_VERSION = 1
# Every family's wheel kinds, in the families' order (the order of KIND's choices and of the usages).
KINDS: dict[str, WheelKind] = {k.kind: k for family in FAMILIES for k in family.verify.wheels}
OPTIONS = sorted(set().union(*(k.options for k in KINDS.values())))


def _takers(name: str) -> str:
    """The kinds that take option `name` ('glue, ...'), for its help."""
    return ", ".join(k.kind for k in KINDS.values() if name in k.options)


def _description() -> str:
    """The module's first line, each kind's usage, then its last line: `faforge wheel --help`'s text."""
    lines = (__doc__ or "").strip().splitlines()
    usages = "\n".join(f"  faforge wheel {k.kind} {k.usage}\n      {k.makes}" for k in KINDS.values())
    return f"{lines[0]}\n\n{usages}\n\n{lines[-1]}\n"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the usages of _description(), as written
    parser.description = _description()
    parser.add_argument(
        "kind",
        choices=KINDS,
        metavar="KIND",
        help="; ".join(f"{k.kind}: {k.what}" for k in KINDS.values()),
    )
    parser.add_argument("source", metavar="SOURCE", help="; ".join(f"{k.kind}: {k.source}" for k in KINDS.values()))
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("dist"),
        metavar="DIR",
        help="where the wheel goes (created if missing); default: ./dist",
    )
    parser.add_argument(
        "--torch-metadata",
        metavar="FILE",
        help=f"{_takers('torch_metadata')}: a torch wheel, or its METADATA, that must require a CUDA runtime of the "
        "kernel's CUDA major (a cross-check; the kernel wheel's requirement follows its CUDA alone)",
    )
    parser.add_argument(
        "--kernel-wheel",
        metavar="WHEEL",
        help=f"{_takers('kernel_wheel')}: the kernel wheel the glue links (pinned exactly)",
    )
    parser.add_argument(
        "--torch",
        metavar="MINOR",
        help=f"{_takers('torch')}: the cell's torch minor, e.g. 2.11 (Requires-Dist torch>=2.11,<2.12)",
    )
    parser.add_argument("--cuda", metavar="X.Y", help=f"{_takers('cuda')}: the CUDA version, e.g. 13.0")
    parser.add_argument(
        "--cxx11-abi",
        type=int,
        choices=[0, 1],
        help=f"{_takers('cxx11_abi')}: the cell's C++ ABI (PyPI torch <= 2.6: 0, >= 2.7: 1)",
    )
    parser.add_argument(
        "--python", metavar="3.X", help=f"{_takers('python')}: the cell's CPython (default: the raw wheel's)"
    )
    parser.add_argument(
        "--build-tag",
        metavar="TAG",
        help=f"{_takers('build_tag')}: the wheel build tag NhHASH, or the cell's {FLASH_ATTN.package} "
        "build string (py312_torch2_11_cu130_cxx11abi1_hHASH_0)",
    )
    parser.add_argument(
        "--archs", metavar="LIST", help=f"{_takers('archs')}: the arch list it was built for, e.g. '80;90a'"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the versioned result (schema: tests/schemas/wheel.json)"
    )


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_options(args: argparse.Namespace) -> None:
    kind = KINDS[args.kind]
    for name in sorted(set(OPTIONS) - kind.options):
        if getattr(args, name) is not None:
            takers = " and ".join(f"`wheel {k.kind}`" for k in KINDS.values() if name in k.options)
            raise FaforgeError(
                f"{_option(name)} goes with {takers}, not `wheel {args.kind}`",
                input=_option(name),
                hint=f"drop {_option(name)}; see `faforge wheel --help`",
            )
    for name in kind.required:
        if getattr(args, name) is None:
            raise FaforgeError(
                f"`wheel {args.kind}` needs {_option(name)}", input=_option(name), hint="see `faforge wheel --help`"
            )


def _check_values(args: argparse.Namespace) -> None:
    """The options' values, before any file is read: a bad one is named at once."""
    from faforge.pipwheel import layout  # noqa: PLC0415 (keeps `faforge --help` fast)
    from faforge.pipwheel.glue import python_tag  # noqa: PLC0415 (keeps `faforge --help` fast)

    if args.torch is not None:
        layout.torch_minor(args.torch)
    if args.cuda is not None:
        layout.cuda_lib_dir(args.cuda)
    if args.python is not None:
        python_tag(args.python)
    if args.build_tag is not None:
        layout.glue_build_tag(args.build_tag)
    if args.archs is not None:
        layout.parse_archs(args.archs)


def execute(args: argparse.Namespace) -> int:
    _check_options(args)
    paths.output_dir(args.out, "--out")
    _check_values(args)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="faforge-wheel-") as tmp:
        work = Path(tmp)
        with step(f"{args.kind} wheel from {args.source}"):
            built = KINDS[args.kind].pack(args, work)
    if args.json:
        print(json.dumps(report(args, built, time.monotonic() - started), indent=2))
    else:
        print(summary(args.kind, built))
    return EXIT_OK


def summary(kind: str, built: BuiltWheel) -> str:
    """One line: the wheel, its tag and why, its size and RUNPATH."""
    why = f"needs {', '.join(built.verdict.limiting)}" if built.verdict.limiting else "the most compatible policy"
    kept = KINDS[kind].kept
    return (
        f"{kind} wheel: {built.path} ({built.verdict.tag}: {why}; {built.facts.size / 1024:.1f} KiB; "
        f"RUNPATH {':'.join(built.runpath)}{kept}) in {built.seconds:.2f}s"
    )


def report(args: argparse.Namespace, built: BuiltWheel, seconds: float) -> dict:
    return {
        "version": WHEEL_VERSION,
        "kind": args.kind,
        "source": str(args.source),
        **built.to_json(),
        "seconds": round(seconds, 3),
    }
