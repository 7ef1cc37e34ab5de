"""Kernel objects across torch minors: `python -m faforge.bench.kernel_objects_across_torch`.

Compiles one kernel TU (default: flash_fwd_hdim32_fp16_sm80.cu, the cheapest) against each given
torch include dir and against the torch shim (torch_shim/, ahead of the first torch), then compares
every pair: preprocessed source (torch_preprocess_diff.source_diff), SASS and cubins (cuobjdump) and the torch
symbols the host code needs.  The shim's preprocessed source names no torch header, so its objects
are the same for every torch; the question answered here is whether they are also the same
instructions as a build against the real torch.  Slow: one full nvcc compile per variant.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from faforge.bench.build_cost import torch_version_at
from faforge.bench.torch_preprocess_diff import object_diff, preprocess, source_diff
from faforge.buildcost.measure import CompileSpec, nvcc_command, run_timed
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN
from faforge.kernels import TORCH_SHIM


def include_dirs(sdist: Path, torch_include: Path, cuda_home: Path, shim: bool) -> list[str]:
    torch_dirs = [str(torch_include), str(torch_include / "torch/csrc/api/include"), str(cuda_home / "include")]
    return ([str(TORCH_SHIM)] if shim else []) + [str(sdist / d) for d in FLASH_ATTN.include_dirs] + torch_dirs


def run(sdist: Path, torch_includes: list[Path], tu: str, arch: str, cuda_home: Path, nice: int, out: Path) -> dict:
    spec = CompileSpec(archs=arch, cxx_std="c++20", cxx11_abi=1)
    nvcc = str(cuda_home / "bin" / "nvcc")
    source = sdist / FLASH_ATTN.kernel_source_dir / tu
    variants = [(f"torch{torch_version_at(t)}", t, False) for t in torch_includes] + [("shim", torch_includes[0], True)]
    objects: dict[str, Path] = {}
    texts: dict[str, str] = {}
    # The JSON written.
    report: dict[str, Any] = {"tu": tu, "arch": arch, "compiles": {}, "preprocessed": {}, "objects": {}}
    for name, torch_include, shim in variants:
        dirs = include_dirs(sdist, torch_include, cuda_home, shim)
        texts[name] = preprocess(nvcc, source, dirs, spec, out / name / "pre")["device"].read_text()
        obj = out / name / (Path(tu).stem + ".o")
        timing = run_timed(nvcc_command([nvcc], source, obj, dirs, spec), out / name, None, nice)
        if timing.returncode != 0:
            raise FaforgeError(f"{name}: nvcc failed on {tu}", hint=timing.stderr_tail[-800:])
        report["compiles"][name] = asdict(timing)
        objects[name] = obj
        print(f"  {name}: {timing.cpu_s:.0f}s cpu, {timing.wall_s:.0f}s wall", flush=True)
    names = list(objects)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            report["preprocessed"][f"{a} vs {b}"] = asdict(source_diff(texts[a], texts[b]))
            report["objects"][f"{a} vs {b}"] = asdict(object_diff(objects[a], objects[b]))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m faforge.bench.kernel_objects_across_torch", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sdist", type=Path, required=True, help=f"unpacked {FLASH_ATTN.package} sdist")
    parser.add_argument(
        "--torch-include", type=Path, action="append", required=True, help="a torch include dir (give two or more)"
    )
    parser.add_argument("--tu", default="flash_fwd_hdim32_fp16_sm80.cu")
    parser.add_argument("--arch", default="80")
    parser.add_argument("--cuda-home", type=Path, default=Path("/usr/local/cuda"))
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="where objects go (default: a temporary dir)")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report = run(
                args.sdist, args.torch_include, args.tu, args.arch, args.cuda_home, args.nice, args.out or Path(tmp)
            )
    except FaforgeError as exc:
        print(f"moonshot: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
