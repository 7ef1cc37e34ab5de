"""The FlashAttention-4 wheel of one known-good set: upstream's wheel, its METADATA pinning the set.

FA4 is one pure-Python wheel; what breaks is the compiled stack it compiles its kernels with at run time, which
PyPI moves under it. The index of a torch minor x CUDA (torch2.11-cu130) serves
  flash_attn_4-4.0.0b40+cu130.torch2.11-py3-none-any.whl
upstream's files unchanged, its METADATA upstream's but for Requires-Dist: `torch>=2.11,<2.12` and the known-good
set of that torch minor and CUDA (variants/flash-attn-4.yaml, exact pins and floors as its `pins` say). Its local
label names the CUDA first, so the torch-range rule (faforge.pipindex.placement) places it in exactly the index of
its one torch minor. Only upstream's own wheel is taken: its sha256 must be a release row's.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import time
from pathlib import Path

from packaging.utils import canonicalize_name

from faforge import paths
from faforge.abi.fatbin import GpuArchs
from faforge.errors import FaforgeError
from faforge.families.flash_attn_4 import sets
from faforge.family import FLASH_ATTN_4
from faforge.pipwheel import layout
from faforge.pipwheel.built import BuiltWheel
from faforge.pipwheel.facts import dist_info_dir, read_wheel, wheel_contents
from faforge.pipwheel.filename import parse_wheel_filename
from faforge.pipwheel.kinds import NO_LABEL, WheelKind
from faforge.pipwheel.manylinux import PlatformVerdict
from faforge.pipwheel.writer import WheelSpec, rewrite_wheel
from faforge.wheelnames import torch_requirement

# Upstream's METADATA fields the writer makes itself, or that the set replaces (its extras' Requires-Dist go
# with Requires-Dist: the set pins cutlass-dsl's CUDA libraries itself).
REPLACED = frozenset(
    {"metadata-version", "name", "version", "summary", "requires-python", "requires-dist", "provides-extra", "dynamic"}
)
# A pure-Python wheel: no platform to judge, no RUNPATH, no GPU code.
ANY = PlatformVerdict(tag="any", aliases=(), machine="any", needs=(), limiting=(), system=(), external=(), inside=())


def upstream_release(raw: Path, data: sets.Fa4Data) -> sets.Release:
    """The release row whose wheel `raw` is, by its sha256; anything else is refused."""
    digest = hashlib.sha256(raw.read_bytes()).hexdigest()
    found = next((r for r in data.releases if r.sha256 == digest), None)
    if found is None:
        known = ", ".join(f"{r.wheel} ({r.sha256[:12]}…)" for r in data.releases)
        raise FaforgeError(
            f"{raw}: its sha256 {digest[:12]}… is none of the {FLASH_ATTN_4.package} releases in {data.path.name} "
            f"({known})",
            hint=f"pass upstream's wheel as PyPI serves it, or add its release row to {FLASH_ATTN_4.data_file}",
            input=str(raw),
        )
    return found


def kept_fields(metadata: bytes) -> tuple[tuple[str, str], ...]:
    """Upstream's METADATA headers, in order, less those in REPLACED (its description body is not kept)."""
    message = email.parser.BytesParser().parsebytes(metadata, headersonly=True)
    return tuple((k, str(v)) for k, v in message.items() if k.lower() not in REPLACED)


def repack_fa4_wheel(
    raw: Path, *, torch: str, cuda: str, out_dir: Path, data: sets.Fa4Data | None = None
) -> BuiltWheel:
    """The wheel of the known-good set of torch minor `torch` and CUDA `cuda` (see the module docstring)."""
    started = time.monotonic()
    data = data or sets.load()
    release = upstream_release(raw, data)
    known = data.set_for(torch, cuda, release.version)
    if known is None:
        listed = ", ".join(s.id for s in data.sets if s.version == release.version) or "none"
        raise FaforgeError(
            f"{FLASH_ATTN_4.package} {release.version} has no known-good set for torch {torch} and CUDA {cuda} "
            f"in {data.path.name} (its sets: {listed})",
            hint=f"pass the torch minor and CUDA of one of its sets, or add that set to {FLASH_ATTN_4.data_file}",
            input=f"--torch {torch} --cuda {cuda}",
        )
    facts = read_wheel(raw)
    contents = wheel_contents(raw)
    raw_info = dist_info_dir(list(contents), parse_wheel_filename(raw.name), str(raw))
    spec = WheelSpec(
        name=str(canonicalize_name(FLASH_ATTN_4.package)),
        version=f"{release.version}+{known.local_label}",
        python_tags=facts.python_tags,
        abi_tags=facts.abi_tags,
        platform_tags=facts.platform_tags,
        requires_python=known.requires_python,
        requires_dist=(torch_requirement(known.torch), *data.requirements(known)),
        summary=f"{FLASH_ATTN_4.package} {release.version} with its known-good set for torch {known.torch} "
        f"and CUDA {known.cuda} ({known.id})",
        extra_metadata=kept_fields(contents[f"{raw_info}/METADATA"]),
        files={},
    )
    # No member is patched: a pure-Python wheel keeps every file as upstream wrote it.
    path = rewrite_wheel(spec, contents, raw_info, member="", patched=raw, out_dir=out_dir)
    return BuiltWheel(
        path=path,
        facts=read_wheel(path),
        verdict=ANY,
        runpath=(),
        gpu=GpuArchs((), ()),
        seconds=time.monotonic() - started,
    )


def pack(args: argparse.Namespace, work: Path) -> BuiltWheel:
    """`faforge wheel fa4`: the wheel of upstream's wheel SOURCE for --torch and --cuda."""
    raw = paths.input_file(args.source, "SOURCE", f"upstream's {FLASH_ATTN_4.package} wheel from PyPI")
    layout.torch_minor(args.torch)
    layout.cuda_tag(args.cuda)
    return repack_fa4_wheel(raw, torch=args.torch, cuda=args.cuda, out_dir=args.out)


FA4_WHEEL = WheelKind(
    kind="fa4",
    project=FLASH_ATTN_4.package,
    label=NO_LABEL,  # its label (cu130.torch2.11) names no pip cell nor arch list: verify reads it itself
    usage="UPSTREAM.whl --torch 2.11 --cuda 13.0 --out DIR",
    makes="upstream's FlashAttention-4 wheel, its METADATA pinning the torch minor and the known-good set",
    what=f"the {FLASH_ATTN_4.package} wheel",
    source=f"upstream's {FLASH_ATTN_4.package} wheel (its sha256 a release row's)",
    options=frozenset({"torch", "cuda"}),
    required=("torch", "cuda"),
    pack=pack,
    kept="none (pure Python); upstream's files unchanged, METADATA pins the known-good set",
)
