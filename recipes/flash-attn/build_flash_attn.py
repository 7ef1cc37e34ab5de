#!/usr/bin/env python
"""Build flash-attn's CUDA extension against the torch of the running Python.

One script serves the conda recipe (rattler-build and conda-build run it in the host environment)
and a local build (any venv with torch, nvcc and ninja). It parses the arguments and orders the
steps; the backend, faforge.backend, does the work (its __init__ says why it replaces upstream's
setup.py), from the recipe's copy in faforge_checker/ or the repository's: the same code. --kernels-only
builds the kernel library (the recipe's libflash-attn-kernels, no torch needed); --kernel-library PATH
the glue against it (the recipe's flash-attn); neither both, the wheel carrying the library.
--only-tus compiles just those kernel TUs into the compiler cache and stops (faforge.release.cost).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The faforge package holding the backend and the ABI checker: --checker-path, else the recipe's copy here, else the repo's.
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--checker-path", default=os.environ.get("FAFORGE_CHECKER_PATH"))
_roots = [Path(p) for p in (_pre.parse_known_args()[0].checker_path, HERE / "faforge_checker", HERE.parent.parent / "scripts") if p]
_root = next((r for r in _roots if (r / "faforge/backend/__init__.py").is_file()), None)
if _root is None:
    print(f"build_flash_attn: error: no faforge/backend in {' or '.join(map(str, _roots))}; pass --checker-path (the folder holding faforge/)", file=sys.stderr)
    sys.exit(2)
sys.path.insert(0, str(_root.resolve()))

from faforge.backend import ccache, flags, glue, ninja, sources, toolchain  # noqa: E402
from faforge.backend.archs import parse_arch_list  # noqa: E402
from faforge.backend.errors import BuildError  # noqa: E402
from faforge.backend.layout import PHILOX_DEFAULT_BITS, check_kernel_library_layout, philox_offset_bits  # noqa: E402
from faforge.backend.logger import log  # noqa: E402
from faforge.backend.plan import kernel_plan  # noqa: E402


def plan_kernels(args, source_dir: Path, archs) -> tuple[dict, int]:
    return kernel_plan(source_dir=source_dir, archs=archs, nvcc_threads=int(args.nvcc_threads), max_jobs=args.max_jobs,
                       compiler_cache=args.compiler_cache, only_tus=args.only_tus)


def build_library(args, source_dir: Path, build_dir: Path, archs, max_jobs: int, philox_bits: int) -> Path | None:
    toolkit, shim, tus = toolchain.native_toolkit(platform.machine()), sources.find_shim_dir(args.shim_dir, HERE), sources.kernel_sources(source_dir)
    return ninja.build_kernel_library(
        source_dir=source_dir, build_dir=build_dir, toolkit=toolkit, shim=shim, kernels=tus[1:], archs=archs, max_jobs=max_jobs,
        only=sources.select_kernels(tus, args.only_tus) if args.only_tus is not None else None, nvcc_threads=int(args.nvcc_threads),
        philox_bits=philox_bits, use_ccache=args.compiler_cache == "ccache")


def show(plan: dict, plan_only: bool) -> bool:
    log("plan " + json.dumps(plan, sort_keys=True))
    if plan_only:
        print(json.dumps(plan, indent=2, sort_keys=True))
    return plan_only


def build_kernels_only(args, source_dir: Path, build_dir: Path) -> Path | None:
    archs = parse_arch_list(args.archs)
    plan, max_jobs = plan_kernels(args, source_dir, archs)
    plan.update(part="kernel library", build_dir=str(build_dir), install_lib_dir=args.install_lib_dir, philox_offset_bits=args.philox_offset_bits)
    if show(plan, args.plan_only):
        return None
    library = build_library(args, source_dir, build_dir, archs, max_jobs, args.philox_offset_bits)
    if library and args.install_lib_dir:
        ninja.install_library(library, Path(args.install_lib_dir))
    return library


def build_glue(args, source_dir: Path, build_dir: Path) -> Path | None:
    """flash_api.cpp against this Python's torch, linked against the kernel library: the one
    given (--kernel-library), or one built here first and carried in the wheel."""
    wheel_dir = Path(args.wheel_dir).resolve()
    if not source_dir.is_dir():
        raise BuildError(f"--source-dir {source_dir}: no such folder; unpack the flash-attn sdist there first "
                         "(pip download --no-deps --no-binary :all: flash-attn==VERSION, then tar -xzf it)")
    torch, cpp_extension, cuda_home = glue.import_torch()
    std, abi, python_link, shim = flags.cxx_standard(torch.__version__), int(args.cxx11_abi), glue.python_link_args(), sources.find_shim_dir(args.shim_dir, HERE)
    given = Path(args.kernel_library).resolve() if args.kernel_library else None
    if given and not given.is_file():
        raise BuildError(f"--kernel-library {args.kernel_library}: no such file; build it with --kernels-only (or install libflash-attn-kernels)")
    archs = parse_arch_list(args.archs) if not given else None
    kernels, max_jobs = plan_kernels(args, source_dir, archs) if archs else ({}, args.max_jobs or 1)
    philox_bits = philox_offset_bits(glue.torch_include_dir(torch))
    if given:
        check_kernel_library_layout(given, philox_bits, torch.__version__)
    plan = {"flash_attn": sources.sdist_version(source_dir), "torch": torch.__version__, "torch_cuda": torch.version.cuda, "cxx_std": std,
            "cxx11_abi": abi, "philox_offset_bits": philox_bits, "build_dir": str(build_dir), "wheel_dir": str(wheel_dir),
            "kernel_library": str(given) if given else {"built here, carried in the wheel": kernels}}
    if show(plan, args.plan_only):
        return None
    library = given or build_library(args, source_dir, build_dir, archs, max_jobs, philox_bits)
    if library is None:
        return None  # --only-tus: kernel objects compiled, nothing to link yet
    return glue.build_wheel(torch=torch, cpp_extension=cpp_extension, cuda_home=cuda_home, source_dir=source_dir, build_dir=build_dir,
                            wheel_dir=wheel_dir, version=plan["flash_attn"], library=library, carry_library=not given, abi=abi, std=std,
                            philox_bits=philox_bits, max_jobs=max_jobs, shim=shim, python_link=python_link)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-dir", default=os.getcwd(), help="unpacked flash-attn sdist (default: cwd)")
    parser.add_argument("--archs", default=os.environ.get("FLASH_ATTN_CUDA_ARCHS"), help="SM list, e.g. '80;90;120+PTX' (env FLASH_ATTN_CUDA_ARCHS)")
    parser.add_argument("--cxx11-abi", choices=["0", "1"], default=os.environ.get("FAFORGE_CXX11_ABI"), help="forced _GLIBCXX_USE_CXX11_ABI (env FAFORGE_CXX11_ABI)")
    parser.add_argument("--build-dir", default=None, help="ninja object dir, kept for resuming (default: SOURCE/build)")
    parser.add_argument("--wheel-dir", default=None, help="where the wheel goes (default: SOURCE/dist)")
    parser.add_argument("--max-jobs", type=int, default=int(os.environ["MAX_JOBS"]) if os.environ.get("MAX_JOBS") else None, help="parallel nvcc jobs (env MAX_JOBS; default: derived from free memory)")
    parser.add_argument("--nvcc-threads", default=os.environ.get("NVCC_THREADS", "1"), help="nvcc --threads (env NVCC_THREADS, default 1)")
    parser.add_argument("--compiler-cache", choices=ccache.COMPILER_CACHES, default=os.environ.get("FAFORGE_COMPILER_CACHE") or "none", help="put a compiler cache in front of nvcc (env FAFORGE_COMPILER_CACHE, default none); ccache reads CCACHE_DIR")
    parser.add_argument("--checker-path", default=os.environ.get("FAFORGE_CHECKER_PATH"), help="directory holding the faforge package (the build backend and the ABI check; default: faforge_checker/ beside this script, else the repo's)")
    parser.add_argument("--only-tus", default=os.environ.get("FAFORGE_BUILD_TUS") or None, help="compile only these kernel TUs (file names) and stop, for a split cell's piece (env FAFORGE_BUILD_TUS)")
    parser.add_argument("--kernels-only", action="store_true", help="build only the kernel library (no torch needed; the recipe's libflash-attn-kernels)")
    parser.add_argument("--install-lib-dir", default=None, help="with --kernels-only: copy the library here (the recipe: $PREFIX/lib)")
    parser.add_argument("--philox-offset-bits", type=int, choices=[32, 64], default=int(os.environ.get("FAFORGE_PHILOX_OFFSET_BITS") or PHILOX_DEFAULT_BITS),
                        help="with --kernels-only: at::PhiloxCudaState's offset_intragraph_ width the library serves, 32 for torch <= 2.9, "
                             "64 for torch >= 2.10 (env FAFORGE_PHILOX_OFFSET_BITS, default 64); other builds read it from torch")
    parser.add_argument("--kernel-library", default=None, help="build only the glue, against this libflash_attn_kernels.so (the recipe's flash-attn)")
    parser.add_argument("--shim-dir", default=None, help="the torch shim (default: torch_shim/ beside this script, else the repo's)")
    parser.add_argument("--install", action="store_true", help="pip-install the wheel into this Python (the recipe's build)")
    parser.add_argument("--plan-only", action="store_true", help="print the resolved build plan as JSON and stop")
    args = parser.parse_args(argv)
    if args.kernels_only and args.kernel_library:
        parser.error("--kernels-only builds the library that --kernel-library names; pass one of them")
    if args.archs is None and not args.kernel_library:
        parser.error("no arch list: pass --archs or set FLASH_ATTN_CUDA_ARCHS")
    if args.cxx11_abi is None and not args.kernels_only:
        parser.error("no C++ ABI: pass --cxx11-abi 0|1 or set FAFORGE_CXX11_ABI")
    if args.compiler_cache not in ccache.COMPILER_CACHES:
        parser.error(f"FAFORGE_COMPILER_CACHE={args.compiler_cache!r}: expected one of {', '.join(ccache.COMPILER_CACHES)}")
    args.wheel_dir = args.wheel_dir or str(Path(args.source_dir) / "dist")
    source_dir, build_dir = Path(args.source_dir).resolve(), Path(args.build_dir or Path(args.source_dir) / "build").resolve()
    try:
        built = (build_kernels_only if args.kernels_only else build_glue)(args, source_dir, build_dir)
    except BuildError as exc:
        print(f"build_flash_attn: error: {exc}", file=sys.stderr)
        return 2
    if built is None and not args.plan_only:
        log("kernel TUs compiled into the compiler cache: nothing linked (the final job links)")
    if built is None:
        return 0
    log(f"{'kernel library' if args.kernels_only else 'wheel'}: {built}")
    return glue.install_wheel(built) if args.install and not args.kernels_only else 0


if __name__ == "__main__":
    sys.exit(main())
