"""Pack a pip wheel from what the conda and backend builds made, without compiling anything again.

  faforge wheel kernel PKG.conda --torch-metadata TORCH.whl|METADATA --out DIR
      the kernel wheel of a libflash-attn-kernels package: its library byte for byte, only its RUNPATH set
  faforge wheel glue RAW.whl --kernel-wheel K.whl --torch 2.11 --cuda 13.0 --cxx11-abi 1 --build-tag 0hHASH --out DIR
      the pip glue of one cell from build_flash_attn.py --kernel-library's wheel: version label, pins, RUNPATH
  faforge wheel fa3 RAW.whl --cuda 13.0 --archs '80;90a' --out DIR
      the abi3 FlashAttention-3 wheel of the FA3 build's wheel: version label, torch>=2.9, RUNPATH

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
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.packagefile import PACKAGE_SUFFIXES
from faforge.pipwheel.built import BuiltWheel
from faforge.pipwheel.facts import read_wheel, requires_dist_of
from faforge.progress import say, step

WHEEL_VERSION = 1
KINDS = ("kernel", "glue", "fa3")
# Which options each kind takes (the rest are refused, so that a misplaced option is never silently ignored).
OPTIONS = {
    "kernel": {"torch_metadata"},
    "glue": {"kernel_wheel", "torch", "cuda", "cxx11_abi", "python", "build_tag"},
    "fa3": {"cuda", "archs"},
}
REQUIRED = {"kernel": (), "glue": ("kernel_wheel", "torch", "cuda", "cxx11_abi", "build_tag"), "fa3": ("cuda", "archs")}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter  # the three usages above, as written
    parser.add_argument(
        "kind",
        choices=KINDS,
        metavar="KIND",
        help=f"kernel: the {FLASH_ATTN.kernel_package} wheel; glue: the {FLASH_ATTN.package} wheel of one pip cell; "
        f"fa3: the {FLASH_ATTN_3.package} wheel",
    )
    parser.add_argument(
        "source",
        metavar="SOURCE",
        help=f"kernel: the {FLASH_ATTN.kernel_package} package (.conda "
        "or .tar.bz2) `faforge build` made; glue: the wheel "
        f"{FLASH_ATTN.build_script} --kernel-library wrote; fa3: the FA3 build's wheel",
    )
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
        help="kernel: a torch wheel, or its METADATA, that must require a CUDA runtime of the kernel's CUDA major "
        "(a cross-check; the kernel wheel's requirement follows its CUDA alone)",
    )
    parser.add_argument(
        "--kernel-wheel", metavar="WHEEL", help="glue: the kernel wheel the glue links (pinned exactly)"
    )
    parser.add_argument(
        "--torch", metavar="MINOR", help="glue: the cell's torch minor, e.g. 2.11 (Requires-Dist torch>=2.11,<2.12)"
    )
    parser.add_argument("--cuda", metavar="X.Y", help="glue, fa3: the CUDA version, e.g. 13.0")
    parser.add_argument(
        "--cxx11-abi", type=int, choices=[0, 1], help="glue: the cell's C++ ABI (PyPI torch <= 2.6: 0, >= 2.7: 1)"
    )
    parser.add_argument("--python", metavar="3.X", help="glue: the cell's CPython (default: the raw wheel's)")
    parser.add_argument(
        "--build-tag",
        metavar="TAG",
        help=f"glue: the wheel build tag NhHASH, or the cell's {FLASH_ATTN.package} "
        "build string (py312_torch2_11_cu130_cxx11abi1_hHASH_0)",
    )
    parser.add_argument("--archs", metavar="LIST", help="fa3: the arch list it was built for, e.g. '80;90a'")
    parser.add_argument(
        "--json", action="store_true", help="print the versioned result (schema: tests/schemas/wheel.json)"
    )


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_options(args: argparse.Namespace) -> None:
    for name in sorted(set().union(*OPTIONS.values()) - OPTIONS[args.kind]):
        if getattr(args, name) is not None:
            takers = " and ".join(f"`wheel {k}`" for k in KINDS if name in OPTIONS[k])
            raise FaforgeError(
                f"{_option(name)} goes with {takers}, not `wheel {args.kind}`",
                input=_option(name),
                hint=f"drop {_option(name)}; see `faforge wheel --help`",
            )
    for name in REQUIRED[args.kind]:
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
            built = {"kernel": _kernel, "glue": _glue, "fa3": _fa3}[args.kind](args, work)
    if args.json:
        print(json.dumps(report(args, built, time.monotonic() - started), indent=2))
    else:
        print(summary(args.kind, built))
    return EXIT_OK


def _kernel(args: argparse.Namespace, work: Path) -> BuiltWheel:
    from faforge.pipwheel.kernel import (  # noqa: PLC0415 (keeps `faforge --help` fast)
        pack_kernel_wheel,
        runtime_range_of_kernel_wheel,
        unpack_kernel_package,
    )
    from faforge.release.package import read_package  # noqa: PLC0415 (keeps `faforge --help` fast)

    metadata = (
        None
        if args.torch_metadata is None
        else paths.input_file(args.torch_metadata, "--torch-metadata", "a torch wheel or its METADATA")
    )
    source = paths.input_file(args.source, "SOURCE", f"a {FLASH_ATTN.kernel_package} package (.conda or .tar.bz2)")
    if not source.name.endswith(PACKAGE_SUFFIXES):
        raise FaforgeError(
            f"SOURCE {source}: not a conda package file",
            input=str(source),
            hint=f"pass the {FLASH_ATTN.kernel_package}-*.conda `faforge build` wrote",
        )
    torch_requires = None if metadata is None else requires_dist_of(metadata, "--torch-metadata")
    package = read_package(source)
    if package.name != FLASH_ATTN.kernel_package:
        raise FaforgeError(
            f"{source}: a {package.name} package, not {FLASH_ATTN.kernel_package}",
            input=str(source),
            hint=f"pass the {FLASH_ATTN.kernel_package} package the cells pin (`faforge matrix --kernels`)",
        )
    requirement = runtime_range_of_kernel_wheel(package.cuda or "", torch_requires)
    say(
        f"CUDA runtime: {requirement}"
        + (f" ({metadata.name} requires a CUDA runtime of that major)" if metadata else "")
    )
    kernel = unpack_kernel_package(
        source,
        work / "package",
        say,
        name=package.name,
        version=package.version,
        build=package.build,
        subdir=package.subdir,
    )
    return pack_kernel_wheel(kernel, runtime_requirement=requirement, out_dir=args.out, work=work / "wheel", say=say)


def _glue(args: argparse.Namespace, work: Path) -> BuiltWheel:
    from faforge.pipwheel.glue import (  # noqa: PLC0415 (keeps `faforge --help` fast)
        GlueCell,
        kernel_wheel_facts,
        repack_glue_wheel,
    )

    kernel = paths.input_file(args.kernel_wheel, "--kernel-wheel", "the kernel wheel `faforge wheel kernel` wrote")
    kernel_wheel_facts(kernel)  # a file that is no kernel wheel is named before the source is read
    raw = paths.input_file(args.source, "SOURCE", f"the wheel {FLASH_ATTN.build_script} --kernel-library wrote")
    python = args.python
    if python is None:
        tags = read_wheel(raw).python_tags
        if len(tags) != 1 or not tags[0].startswith("cp3"):
            raise FaforgeError(
                f"SOURCE {raw}: its Python tag is {'.'.join(tags)}, not one CPython's",
                input=str(raw),
                hint="pass the cell's --python, or the wheel the cell's Python built",
            )
        python = f"3.{tags[0][3:]}"
    cell = GlueCell(torch=args.torch, cuda=args.cuda, cxx11_abi=args.cxx11_abi, python=python, build_tag=args.build_tag)
    return repack_glue_wheel(raw, cell=cell, kernel_wheel=kernel, out_dir=args.out, work=work / "wheel", say=say)


def _fa3(args: argparse.Namespace, work: Path) -> BuiltWheel:
    from faforge.families.flash_attn_3.wheel import repack_fa3_wheel  # noqa: PLC0415 (keeps `faforge --help` fast)

    raw = paths.input_file(args.source, "SOURCE", f"the {FLASH_ATTN_3.package} build's wheel")
    return repack_fa3_wheel(raw, cuda=args.cuda, archs=args.archs, out_dir=args.out, work=work / "wheel", say=say)


def summary(kind: str, built: BuiltWheel) -> str:
    """One line: the wheel, its tag and why, its size and RUNPATH."""
    why = f"needs {', '.join(built.verdict.limiting)}" if built.verdict.limiting else "the most compatible policy"
    kept = (
        "; the conda build's library, only its RUNPATH set"
        if kind == "kernel"
        else "; only the binary's RUNPATH changed"
    )
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
