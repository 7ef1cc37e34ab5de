"""The FlashAttention-3 wheel: one abi3 wheel per (platform, CUDA, arch list), for every torch >= 2.9.

FA3 is built against torch's stable C ABI (TORCH_TARGET_VERSION 2.9, faforge.families.flash_attn_3.backend), so one
binary serves every later torch minor: no per-torch glue, no kernel split. The build's wheel (tests/gpu/fa3_canary.py
packs the build's install folder as flash_attn_3-3.0.0-cp310-abi3-linux_x86_64.whl) is repacked as
  flash_attn_3-3.0.0+cu130.sm80.90a-cp310-abi3-<manylinux tag>.whl
with the local label naming CUDA and the arch list (so that pip and uv never take a CUDA 12 build for a
CUDA 13 torch), Requires-Dist torch>=2.9 (the stable ABI's floor), the extension's RUNPATH set for pip's
layout, and the platform tag of its ELF file. The arch list must be the GPU code the binary holds, and its
CUDA runtime the one named.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from faforge import paths
from faforge.abi.elf import read_info
from faforge.abi.fatbin import read_gpu_archs
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.families.flash_attn_3.backend import EXTENSION, TORCH_TARGET_VERSION
from faforge.family import FLASH_ATTN_3
from faforge.pipwheel import layout
from faforge.pipwheel.built import BuiltWheel
from faforge.pipwheel.facts import dist_info_dir, read_wheel, wheel_contents
from faforge.pipwheel.filename import parse_wheel_filename
from faforge.pipwheel.kinds import ARCHS_LABEL, WheelKind
from faforge.pipwheel.manylinux import platform_tag
from faforge.pipwheel.patch import set_runpath
from faforge.pipwheel.writer import ELF_MAGIC, WheelSpec, rewrite_wheel
from faforge.progress import say


def torch_floor() -> str:
    """The stable ABI's oldest torch, from the build's TORCH_TARGET_VERSION (0x0209000000000000 -> 2.9)."""
    value = int(TORCH_TARGET_VERSION, 16)
    return f"{value >> 56}.{value >> 48 & 0xFF}"


def expected_gpu(archs: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """('80', '90a', '120+PTX') -> SASS {sm_80, sm_90a, sm_120}, PTX {compute_120}."""
    sass = {f"sm_{a.removesuffix('+PTX')}" for a in archs}
    ptx = {f"compute_{a.removesuffix('+PTX')}" for a in archs if a.endswith("+PTX")}
    return sass, ptx


def repack_fa3_wheel(
    raw: Path, *, cuda: str, archs: str, out_dir: Path, work: Path, say: Callable[[str], None] = lambda line: None
) -> BuiltWheel:
    """Write the pip FA3 wheel of the build's raw wheel (see the module docstring)."""
    started = time.monotonic()
    raw = Path(raw)
    facts = read_wheel(raw)
    if facts.name != canonicalize_name(FLASH_ATTN_3.package):
        raise FaforgeError(
            f"{raw}: a {facts.name} wheel, not {FLASH_ATTN_3.package}",
            hint="pass the FA3 build's wheel",
            input=str(raw),
        )
    if facts.abi_tags != ("abi3",):
        raise FaforgeError(
            f"{raw}: its ABI tag is {'.'.join(facts.abi_tags)}, not abi3",
            hint="pass the stable-ABI build's wheel",
            input=str(raw),
        )
    arch_list = layout.parse_archs(archs)
    label = f"{layout.cuda_tag(cuda)}.{layout.arch_label(arch_list)}"
    contents = wheel_contents(raw)
    member = f"{FLASH_ATTN_3.module}/{EXTENSION}"
    elves = sorted(n for n, data in contents.items() if data.startswith(ELF_MAGIC))
    if elves != [member]:
        raise FaforgeError(
            f"{raw}: holds {', '.join(elves) or 'no ELF file'}, not {member} alone",
            hint="pass the FA3 build's wheel",
            input=str(raw),
            exit_code=EXIT_PROBLEMS,
        )
    work.mkdir(parents=True, exist_ok=True)
    original = work / "raw" / EXTENSION
    original.parent.mkdir(exist_ok=True)
    original.write_bytes(contents[member])
    sass, ptx = expected_gpu(arch_list)
    gpu = read_gpu_archs(original)
    if set(gpu.sass) != sass or set(gpu.ptx) != ptx:
        raise FaforgeError(
            f"{raw}: its GPU code is {', '.join(gpu.sass + gpu.ptx) or 'none'}, but --archs {archs} says "
            f"{', '.join(sorted(sass | ptx))}",
            hint="pass the arch list it was built for",
            exit_code=EXIT_PROBLEMS,
        )
    major, _ = layout.parse_cuda(cuda)
    cudart = [n for n in read_info(original).needed if n.startswith("libcudart.so.")]
    if cudart and cudart != [f"libcudart.so.{major}"]:
        raise FaforgeError(
            f"{raw}: it links {', '.join(cudart)}, not the CUDA {cuda} runtime libcudart.so.{major}",
            hint="pass the CUDA it was built with",
            exit_code=EXIT_PROBLEMS,
        )
    runpath = layout.package_runpath(cuda)
    patched = work / EXTENSION
    set_runpath(original, patched, runpath, say=say)
    verdict = platform_tag([patched], what=raw.name)
    raw_info = dist_info_dir(list(contents), parse_wheel_filename(raw.name), str(raw))
    spec = WheelSpec(
        name=facts.name,
        version=f"{Version(facts.version).public}+{label}",
        python_tags=facts.python_tags,
        abi_tags=facts.abi_tags,
        platform_tags=(verdict.tag,),
        requires_python=facts.requires_python,
        requires_dist=(
            f"torch>={torch_floor()}",
            *(r for r in facts.requires_dist if canonicalize_name(Requirement(r).name) != "torch"),
        ),
        summary=f"{FLASH_ATTN_3.title} (CUDA {cuda}, {layout.arch_label(arch_list)}) "
        f"on torch's stable ABI, for torch >= {torch_floor()}",
        files={},
    )
    path = rewrite_wheel(spec, contents, raw_info, member=member, patched=patched, out_dir=out_dir)
    return BuiltWheel(
        path=path, facts=read_wheel(path), verdict=verdict, runpath=runpath, gpu=gpu, seconds=time.monotonic() - started
    )


def pack(args: argparse.Namespace, work: Path) -> BuiltWheel:
    """`faforge wheel fa3`: the wheel of the build's raw wheel SOURCE."""
    raw = paths.input_file(args.source, "SOURCE", f"the {FLASH_ATTN_3.package} build's wheel")
    return repack_fa3_wheel(raw, cuda=args.cuda, archs=args.archs, out_dir=args.out, work=work / "wheel", say=say)


FA3_WHEEL = WheelKind(
    kind="fa3",
    project=FLASH_ATTN_3.package,
    label=ARCHS_LABEL,
    usage="RAW.whl --cuda 13.0 --archs '80;90a' --out DIR",
    makes="the abi3 FlashAttention-3 wheel of the FA3 build's wheel: version label, torch>=2.9, RUNPATH",
    what=f"the {FLASH_ATTN_3.package} wheel",
    source="the FA3 build's wheel",
    options=frozenset({"cuda", "archs"}),
    required=("cuda", "archs"),
    pack=pack,
    kept="; only the binary's RUNPATH changed",
)
