#!/usr/bin/env python
"""Build flash-attn's CUDA extension against the torch of the running Python.

One script serves the conda recipe (rattler-build and conda-build run it in the host environment)
and a local build (any venv with torch, nvcc and ninja). It parses the arguments and orders the
steps; the backend, faforge.backend, does the work (its __init__ says why it replaces upstream's
setup.py), from the recipe's copy in faforge_checker/ or the repository's: the same code. --kernels-only
builds the kernel library (the recipe's libflash-attn-kernels, no torch needed); --kernel-library PATH
the glue against it (the recipe's flash-attn); neither both, the wheel carrying the library.
--only-tus compiles just those kernel TUs into the compiler cache and stops (faforge.costmodel.runners).
--torch-site DIR builds the glue against a torch it does not import (a cross build's target torch:
faforge.backend.foreign), with the target Python's headers (--python-include) and libpython (--python-library).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The faforge package holding the backend and the ABI checker:
# --checker-path, else the recipe's copy here, else the repo's.
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--checker-path", default=os.environ.get("FAFORGE_CHECKER_PATH"))
_explicit = _pre.parse_known_args()[0].checker_path  # when given, the only place looked at
_roots = [Path(_explicit)] if _explicit else [HERE / "faforge_checker", HERE.parent.parent / "scripts"]
_root = next((r for r in _roots if (r / "faforge/backend/__init__.py").is_file()), None)
if _root is None:
    print(
        f"build_flash_attn: error: no faforge/backend in {' or '.join(map(str, _roots))}; "
        "pass --checker-path (the folder holding faforge/)",
        file=sys.stderr,
    )
    sys.exit(2)
sys.path.insert(0, str(_root.resolve()))

from faforge.backend import (  # noqa: E402 (sys.path set above)
    flags,
    foreign,
    glue,
    ninja,
    options,
    sources,
    target_torch,
    toolchain,
)
from faforge.backend.archs import parse_arch_list  # noqa: E402 (sys.path set above)
from faforge.backend.errors import BuildError  # noqa: E402 (sys.path set above)
from faforge.backend.layout import check_kernel_library_layout, philox_offset_bits  # noqa: E402 (sys.path set above)
from faforge.backend.logger import log  # noqa: E402 (sys.path set above)
from faforge.backend.plan import kernel_plan  # noqa: E402 (sys.path set above)


def plan_kernels(args, source_dir: Path, archs) -> tuple[dict, int]:
    return kernel_plan(
        source_dir=source_dir,
        archs=archs,
        nvcc_threads=args.nvcc_threads,
        max_jobs=args.max_jobs,
        compiler_cache=args.compiler_cache,
        only_tus=args.only_tus,
    )


def build_library(args, source_dir: Path, build_dir: Path, archs, max_jobs: int, philox_bits: int) -> Path | None:
    toolkit, shim, tus = (
        toolchain.target_toolkit(dict(os.environ), platform.machine()),
        sources.find_shim_dir(args.shim_dir, HERE),
        sources.kernel_sources(source_dir),
    )
    for line in toolchain.check_tool_releases(
        toolkit.nvcc, toolchain.nvcc_tools(toolkit.nvcc, build_dir / "nvcc-probe")
    ):
        log(line)  # which CUDA tools compile the kernels; a stray one of another CUDA stops the build
    return ninja.build_kernel_library(
        source_dir=source_dir,
        build_dir=build_dir,
        toolkit=toolkit,
        shim=shim,
        kernels=tus[1:],
        archs=archs,
        max_jobs=max_jobs,
        only=sources.select_kernels(tus, args.only_tus) if args.only_tus is not None else None,
        nvcc_threads=args.nvcc_threads,
        philox_bits=philox_bits,
        use_ccache=args.compiler_cache == "ccache",
    )


def show(plan: dict, plan_only: bool) -> bool:
    log("plan " + json.dumps(plan, sort_keys=True))
    if plan_only:
        print(json.dumps(plan, indent=2, sort_keys=True))
    return plan_only


def build_kernels_only(args, source_dir: Path, build_dir: Path) -> Path | None:
    archs = parse_arch_list(args.archs)
    plan, max_jobs = plan_kernels(args, source_dir, archs)
    plan.update(
        part="kernel library",
        build_dir=str(build_dir),
        install_lib_dir=args.install_lib_dir,
        philox_offset_bits=args.philox_offset_bits,
    )
    if show(plan, args.plan_only):
        return None
    library = build_library(args, source_dir, build_dir, archs, max_jobs, args.philox_offset_bits)
    if library and args.install_lib_dir:
        ninja.install_library(library, Path(args.install_lib_dir))
    return library


def build_glue(args, source_dir: Path, build_dir: Path) -> Path | None:
    """flash_api.cpp against this Python's torch (or, with --torch-site, a target's, read without importing it),
    linked against the kernel library: the one given (--kernel-library),
    or one built here first and carried in the wheel."""
    wheel_dir = Path(args.wheel_dir).resolve()
    if not source_dir.is_dir():
        raise BuildError(
            f"--source-dir {source_dir}: no such folder; unpack the flash-attn sdist there first "
            "(pip download --no-deps --no-binary :all: flash-attn==VERSION, then tar -xzf it)"
        )
    if args.torch_site:
        target = target_torch.read_torch_site(Path(args.torch_site).resolve())
        torch_version, torch_cuda, torch_include = target.version, target.cuda, target.include_dirs[0]
    else:
        torch, cpp_extension, cuda_home = glue.import_torch()
        python_link = (
            glue.python_link_args()
        )  # before any compile: a Python without a shared libpython cannot link the glue
        torch_version, torch_cuda, torch_include = torch.__version__, torch.version.cuda, glue.torch_include_dir(torch)
    std, abi, shim = flags.cxx_standard(torch_version), int(args.cxx11_abi), sources.find_shim_dir(args.shim_dir, HERE)
    given = Path(args.kernel_library).resolve() if args.kernel_library else None
    if given and not given.is_file():
        raise BuildError(
            f"--kernel-library {args.kernel_library}: no such file; build "
            "it with --kernels-only (or install libflash-attn-kernels)"
        )
    archs = parse_arch_list(args.archs) if not given else None
    kernels, max_jobs = plan_kernels(args, source_dir, archs) if archs else ({}, args.max_jobs or 1)
    philox_bits = philox_offset_bits(torch_include)
    if given:
        check_kernel_library_layout(given, philox_bits, torch_version)
    plan = {
        "flash_attn": sources.sdist_version(source_dir),
        "torch": torch_version,
        "torch_cuda": torch_cuda,
        "cxx_std": std,
        "cxx11_abi": abi,
        "philox_offset_bits": philox_bits,
        "build_dir": str(build_dir),
        "wheel_dir": str(wheel_dir),
        "kernel_library": str(given) if given else {"built here, carried in the wheel": kernels},
    }
    if args.torch_site:
        environ = dict(os.environ)
        toolkit = toolchain.target_toolkit(environ, platform.machine())
        machine, python = (
            toolchain.target_machine(environ, platform.machine()),
            foreign.target_python(args.python_include, args.python_library),
        )
        if target.machine != machine:
            raise BuildError(
                f"--torch-site {args.torch_site}: its torch is built "
                f"for {target.machine}, but the build targets {machine} "
                "(conda's target_platform, else this machine); set "
                "target_platform to the torch's platform (linux-aarch64)"
            )
        if target.cxx11_abi is not None and target.cxx11_abi != abi:
            raise BuildError(
                f"--torch-site {args.torch_site}: torch {torch_version} is "
                f"built with _GLIBCXX_USE_CXX11_ABI={target.cxx11_abi}; "
                f"a glue forced to {abi} cannot link against it: pass --cxx11-abi {target.cxx11_abi}"
            )
        cxx = toolchain.host_cxx(toolkit, environ)
        plan.update(
            torch_site=str(target.site),
            target=machine,
            cxx=cxx,
            python=python.version,
            python_library=str(python.library),
        )
    if show(plan, args.plan_only):
        return None
    library = given or build_library(args, source_dir, build_dir, archs, max_jobs, philox_bits)
    if library is None:
        return None  # --only-tus: kernel objects compiled, nothing to link yet
    common = dict(
        source_dir=source_dir,
        build_dir=build_dir,
        wheel_dir=wheel_dir,
        version=plan["flash_attn"],
        library=library,
        carry_library=not given,
        abi=abi,
        std=std,
        philox_bits=philox_bits,
        max_jobs=max_jobs,
        shim=shim,
    )
    if args.torch_site:
        return foreign.build_wheel(
            torch=target,
            python=python,
            machine=machine,
            cxx=cxx,
            cuda_includes=toolkit.include_dirs(environ),
            cudart_dirs=toolkit.cudart_dirs(environ),
            **common,
        )
    return glue.build_wheel(
        torch=torch, cpp_extension=cpp_extension, cuda_home=cuda_home, python_link=python_link, **common
    )


def main(argv: list[str] | None = None) -> int:
    try:
        args = options.parse(__doc__.split("\n\n")[0], argv)  # BuildError: a refused environment variable
        source_dir, build_dir = (
            Path(args.source_dir).resolve(),
            Path(args.build_dir or Path(args.source_dir) / "build").resolve(),
        )
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
