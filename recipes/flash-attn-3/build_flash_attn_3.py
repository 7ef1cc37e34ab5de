#!/usr/bin/env python
"""Build FlashAttention-3 (hopper/) as a stable-ABI extension: flash_attn_3/_C.abi3.so and its Python files.

The recipe's build script, and a local build (any prefix with a CUDA torch >= 2.9, nvcc and ninja). It
finds torch's headers and libraries without importing torch (a cross build's host torch cannot run
here), compiles each TU with its own GPU code and the glue against torch/csrc/stable
(faforge.families.flash_attn_3.backend says what hopper/setup.py does and where), links, and installs into
--install-dir.
--disable drops FA3 features as FLASH_ATTENTION_DISABLE_* does upstream (the GPU canary's trimmed build);
the package declares what it contains in flash_attn_config.py, as upstream's build does. --only-tus
(env FAFORGE_BUILD_TUS) compiles just those TUs and stops: a piece job of a package too long for one CI job,
which with --compiler-cache ccache (env FAFORGE_COMPILER_CACHE) fills the cache the final full build reads
(faforge.release.plan.stage), as flash-attn's kernel pieces do.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--checker-path", default=os.environ.get("FAFORGE_CHECKER_PATH"))
_explicit = _pre.parse_known_args()[0].checker_path
_roots = [Path(_explicit)] if _explicit else [HERE / "faforge_checker", HERE.parent.parent / "scripts"]
_root = next((r for r in _roots if (r / "faforge/families/flash_attn_3/backend.py").is_file()), None)
if _root is None:
    print(
        f"build_flash_attn_3: error: no faforge/backend in {' or '.join(map(str, _roots))}; pass --checker-path",
        file=sys.stderr,
    )
    sys.exit(2)
sys.path.insert(0, str(_root.resolve()))

from faforge.backend import ccache, options, toolchain  # noqa: E402 (sys.path set above)
from faforge.backend.errors import BuildError  # noqa: E402 (sys.path set above)
from faforge.backend.jobs import available_memory_gb, derive_max_jobs  # noqa: E402 (sys.path set above)
from faforge.backend.logger import log  # noqa: E402 (sys.path set above)
from faforge.backend.ninja import run_ninja  # noqa: E402 (sys.path set above)
from faforge.backend.sources import select_kernels  # noqa: E402 (sys.path set above)
from faforge.families.flash_attn_3 import backend as fa3  # noqa: E402 (sys.path set above)
from faforge.family import FLASH_ATTN_3  # noqa: E402 (sys.path set above)

# Where torch's stable C functions live (aoti_torch_* in libtorch_cpu, the CUDA stream one in libtorch_cuda),
# linked as needed after libstdc++, so that no C++ runtime symbol binds to a torch library's weak copy
# (libtorch.so re-exports std::basic_stringbuf::str, and became a DT_NEEDED of the first builds).
TORCH_LIBRARIES = ("-lstdc++", "-ltorch_cpu", "-ltorch_cuda")
# Where flash_attn_3/_C.abi3.so finds torch's libraries and the CUDA runtime without `import torch` first:
# a conda prefix's lib/ (from lib/python3.X/site-packages/flash_attn_3/), and a pip environment's
# site-packages/torch/lib.
RUNPATH = ("$ORIGIN/../../..", "$ORIGIN/../torch/lib")


def torch_dir(explicit: str | None) -> Path:
    """torch/ of the host environment: --torch-dir, else where this Python would import it from (not imported)."""
    if explicit:
        found = Path(explicit)
    else:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            raise BuildError("no torch in this Python's environment; install a CUDA torch >= 2.9 or pass --torch-dir")
        found = Path(next(iter(spec.submodule_search_locations)))
    if not (found / "include/torch/csrc/stable").is_dir():
        raise BuildError(
            f"--torch-dir {found}: no include/torch/csrc/stable, so not a torch >= 2.9 (the stable ABI's headers)"
        )
    return found


def python_includes(explicit: list[str] | None) -> list[str]:
    """Python.h's folder and any more the target's headers need: --python-include, else this Python's
    (conda's cross-python answers with the target's)."""
    found = [Path(p) for p in explicit] if explicit else [Path(sysconfig.get_paths()["include"])]
    if not (found[0] / "Python.h").is_file():
        raise BuildError(
            f"--python-include {found[0]}: no Python.h there; install "
            "the Python headers (python3-dev) or name their folder"
        )
    return [str(p) for p in found]


def env(name: str):
    """The variable standing in for an option, checked as
    flash-attn's build script checks it (faforge.backend.options)."""
    return options.from_env(name, *options.ENV_OPTIONS[name])


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source-dir", default=".", help="the flash-attention repository (hopper/, csrc/cutlass/)")
    p.add_argument(
        "--archs",
        default=os.environ.get("FLASH_ATTN_CUDA_ARCHS", "80;90a"),
        help="'80;90a' (env FLASH_ATTN_CUDA_ARCHS)",
    )
    p.add_argument(
        "--disable", default="", help=f"FA3 features not to build, comma-separated ({', '.join(fa3.FEATURES)})"
    )
    p.add_argument("--build-dir", default="build", help="ninja's folder, kept for resuming")
    p.add_argument("--install-dir", help="site-packages to install flash_attn_3/ and flash_attn_interface.py into")
    p.add_argument(
        "--torch-dir", help="torch/ to compile and link against (default: this Python's, found without importing it)"
    )
    p.add_argument(
        "--python-include",
        action="append",
        help="the target Python's header folders, Python.h's first (default: this "
        "Python's; a cross build outside conda's cross-python "
        "names the target's, whose pyconfig.h differs; repeatable, "
        "for Debian's multiarch pyconfig.h)",
    )
    p.add_argument(
        "--max-jobs",
        type=int,
        default=int(os.environ["MAX_JOBS"]) if os.environ.get("MAX_JOBS", "").isdigit() else None,
    )
    p.add_argument(
        "--checker-path", help="folder holding the faforge package (default: faforge_checker/ here, else the repo's)"
    )
    p.add_argument(
        "--compiler-cache",
        type=options.one_of(*ccache.COMPILER_CACHES),
        default=env("FAFORGE_COMPILER_CACHE"),
        help="put a compiler cache in front of nvcc (env "
        "FAFORGE_COMPILER_CACHE, default none); ccache reads CCACHE_DIR",
    )
    p.add_argument(
        "--only-tus",
        default=env("FAFORGE_BUILD_TUS"),
        help="compile only these TUs (file names) and stop before the "
        "link: a piece job (env FAFORGE_BUILD_TUS), or a compile-time sample for faforge bench-build",
    )
    p.add_argument("--plan-only", action="store_true", help="print the TUs and flags as JSON and stop")
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> Path | None:
    source = Path(args.source_dir).resolve()
    hopper = source / FLASH_ATTN_3.source_dir
    if not (hopper / fa3.STABLE_GLUE).is_file():
        raise BuildError(
            f"--source-dir {source}: no {FLASH_ATTN_3.host_source}; pass the flash-attention repository's root"
        )
    archs, disabled = fa3.parse_archs(args.archs), fa3.parse_disabled(args.disable)
    if "80" not in archs and "SM8x" not in disabled:
        disabled |= {"SM8x"}  # no sm_80 in the list: the Ampere fallback's TUs cannot be built
    tus = fa3.sources(disabled)
    missing = [t for t in tus if not (hopper / t).is_file()]
    if missing:
        raise BuildError(
            f"{hopper}: {len(missing)} TUs hopper/setup.py would compile "
            f"are missing, e.g. {missing[0]}; is this the pinned commit?"
        )
    torch = torch_dir(args.torch_dir)
    toolkit = toolchain.target_toolkit(dict(os.environ), platform.machine())
    cpus = os.cpu_count() or 1
    max_jobs = args.max_jobs or derive_max_jobs(
        available_memory_gb(), cpus, len(archs), 1, worst_gb=fa3.WORST_CASE_GB_PER_JOB
    )
    plan = {
        "family": FLASH_ATTN_3.package,
        "tus": len(tus),
        "archs": archs,
        "disabled": sorted(disabled),
        "torch_dir": str(torch),
        "cuda_home": toolkit.home,
        "max_jobs": max_jobs,
        "build_dir": str(Path(args.build_dir).resolve()),
        "compiler_cache": args.compiler_cache,
    }
    log("plan " + json.dumps(plan, sort_keys=True))
    if args.plan_only:
        print(json.dumps({**plan, "sources": tus}, indent=2))
        return None
    for line in toolchain.check_tool_releases(
        toolkit.nvcc, toolchain.nvcc_tools(toolkit.nvcc, Path(args.build_dir) / "nvcc-probe")
    ):
        log(line)
    environ = dict(os.environ)
    include_dirs = [
        str(hopper),
        str(source / "csrc/cutlass/include"),
        str(torch / "include"),
        str(torch / "include/torch/csrc/api/include"),
        *python_includes(args.python_include),
        *toolkit.include_dirs(environ),
    ]
    cudart = toolkit.cudart_dirs(environ)
    link = [
        f"-L{torch / 'lib'}",
        "-Wl,--as-needed",
        *TORCH_LIBRARIES,
        *(f"-L{d}" for d in cudart),
        "-lcudart",
        *(f"-Wl,-rpath,{r}" for r in RUNPATH),
    ]
    cxx = toolkit.host_compiler or environ.get("CXX") or shutil.which("g++") or "c++"
    out = Path(args.build_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    only = select_kernels(tus, args.only_tus) if args.only_tus is not None else None
    log(f"{len(only) if only else len(tus)} TUs")
    targets = [fa3.object_name(tu) for tu in only] if only else []
    with ccache.nvcc_command(args.compiler_cache == "ccache", source, toolkit.nvcc, [str(torch), toolkit.home]) as nvcc:
        text = fa3.extension_ninja(
            hopper=hopper,
            tus=tus,
            nvcc=nvcc,
            cxx=cxx,
            include_dirs=include_dirs,
            disabled=disabled,
            archs=archs,
            link_flags=link,
            host_flags=toolkit.host_flags,
        )
        seconds = run_ninja(out, text, max_jobs, targets, what=f"the {FLASH_ATTN_3.package}")
    if only:
        log(f"compiled {len(only)} TUs in {seconds:.0f}s; --only-tus: nothing linked or installed")
        return None
    log(f"built {out / fa3.EXTENSION} in {seconds:.0f}s")
    if args.install_dir:
        nvcc = ".".join(map(str, toolchain.nvcc_version(toolkit.nvcc)))
        install(out / fa3.EXTENSION, hopper, Path(args.install_dir), fa3.config_module(disabled, archs, tus, nvcc))
    return out / fa3.EXTENSION


def install(extension: Path, hopper: Path, site: Path, config: str) -> None:
    """flash_attn_3/ (upstream's package and the extension), and beside it, as setup.py installs them,
    flash_attn_interface.py and the generated flash_attn_config.py (what this build contains)."""
    package = site / FLASH_ATTN_3.module
    package.mkdir(parents=True, exist_ok=True)
    for path in sorted((hopper / FLASH_ATTN_3.module).glob("*.py")):
        shutil.copy2(path, package / path.name)
    shutil.copy2(hopper / f"{FLASH_ATTN_3.interface_module}.py", site / f"{FLASH_ATTN_3.interface_module}.py")
    shutil.copy2(extension, package / fa3.EXTENSION)
    (site / f"{FLASH_ATTN_3.config_module}.py").write_text(config)
    log(f"installed {FLASH_ATTN_3.module}/ and {FLASH_ATTN_3.interface_module}.py into {site}")


def main(argv: list[str] | None = None) -> int:
    try:
        build(parse(argv))
    except BuildError as exc:
        print(f"build_flash_attn_3: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
