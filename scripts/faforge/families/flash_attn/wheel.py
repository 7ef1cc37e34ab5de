"""flash-attn 2's wheels (the pip world): the kernel wheel of a libflash-attn-kernels package and the glue wheel of
one pip cell, as `faforge wheel kernel|glue` packs them (faforge.pipwheel.kernel, faforge.pipwheel.glue)."""

from __future__ import annotations

import argparse
from pathlib import Path

from faforge import paths
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.packagefile import PACKAGE_SUFFIXES
from faforge.pipwheel.built import BuiltWheel
from faforge.pipwheel.facts import read_wheel, requires_dist_of
from faforge.pipwheel.kinds import CELL_LABEL, KERNEL_LABEL, WheelKind
from faforge.progress import say


def pack_kernel(args: argparse.Namespace, work: Path) -> BuiltWheel:
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


def pack_glue(args: argparse.Namespace, work: Path) -> BuiltWheel:
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


KERNEL_WHEEL = WheelKind(
    kind="kernel",
    project=FLASH_ATTN.kernel_package,
    label=KERNEL_LABEL,
    usage="PKG.conda --torch-metadata TORCH.whl|METADATA --out DIR",
    makes=f"the kernel wheel of a {FLASH_ATTN.kernel_package} package: its library byte for byte, only its RUNPATH set",
    what=f"the {FLASH_ATTN.kernel_package} wheel",
    source=f"the {FLASH_ATTN.kernel_package} package (.conda or .tar.bz2) `faforge build` made",
    options=frozenset({"torch_metadata"}),
    required=(),
    pack=pack_kernel,
    kept="; the conda build's library, only its RUNPATH set",
)
GLUE_WHEEL = WheelKind(
    kind="glue",
    project=FLASH_ATTN.package,
    label=CELL_LABEL,
    usage="RAW.whl --kernel-wheel K.whl --torch 2.11 --cuda 13.0 --cxx11-abi 1 --build-tag 0hHASH --out DIR",
    makes=f"the pip glue of one cell from {FLASH_ATTN.build_script} --kernel-library's wheel: version label, pins, "
    "RUNPATH",
    what=f"the {FLASH_ATTN.package} wheel of one pip cell",
    source=f"the wheel {FLASH_ATTN.build_script} --kernel-library wrote",
    options=frozenset({"kernel_wheel", "torch", "cuda", "cxx11_abi", "python", "build_tag"}),
    required=("kernel_wheel", "torch", "cuda", "cxx11_abi", "build_tag"),
    pack=pack_glue,
    kept="; only the binary's RUNPATH changed",
)
