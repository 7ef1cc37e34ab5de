"""The build script's command line, and the environment variables that stand in for its options.

Each variable is read through the parser its option uses, so a value the option would refuse is refused
the same way, naming the variable: an argparse default is checked against neither `type` nor `choices`,
so FAFORGE_CXX11_ABI=2 or FAFORGE_PHILOX_OFFSET_BITS=48 went through, and MAX_JOBS=x ended in a
traceback. An empty value is unset (the recipe passes `env.get(NAME, default="")` for an unset one).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from faforge.backend.ccache import COMPILER_CACHES
from faforge.backend.errors import BuildError
from faforge.backend.layout import PHILOX_DEFAULT_BITS
from faforge.family import FLASH_ATTN

SHOWN_CHARS = 60  # of a refused value, escaped


def positive_int(text: str) -> int:
    """A count of jobs or threads (argparse shows an ArgumentTypeError's own words)."""
    if not (text.isdigit() and len(text) <= 4 and 1 <= int(text) <= 4096):
        raise argparse.ArgumentTypeError("expected a whole number from 1 to 4096")
    return int(text)


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}")
        return text

    return parse


def philox_bits(text: str) -> int:
    return int(one_of("32", "64")(text))


def from_env(
    name: str, parse: Callable[[str], object], default: object = None, environ: Mapping[str, str] = os.environ
) -> object:
    """The variable's value through `parse`, `default` when it is unset or empty; BuildError naming it otherwise."""
    text = environ.get(name, "")
    if text == "":
        return default
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        shown = ascii(text[:SHOWN_CHARS]) + ("..." if len(text) > SHOWN_CHARS else "")
        raise BuildError(f"${name}={shown}: {exc}; set it to a valid value or unset it") from None


# The variables that stand in for options: each one's parser and its value when unset.
ENV_OPTIONS: dict[str, tuple[Callable[[str], object], object]] = {
    "FLASH_ATTN_CUDA_ARCHS": (str, None),
    "FAFORGE_CXX11_ABI": (one_of("0", "1"), None),
    "MAX_JOBS": (positive_int, None),
    "NVCC_THREADS": (positive_int, 1),
    "FAFORGE_COMPILER_CACHE": (one_of(*COMPILER_CACHES), "none"),
    "FAFORGE_CHECKER_PATH": (str, None),
    "FAFORGE_BUILD_TUS": (str, None),
    "FAFORGE_PHILOX_OFFSET_BITS": (philox_bits, PHILOX_DEFAULT_BITS),
}


def parser(description: str, environ: Mapping[str, str] = os.environ) -> argparse.ArgumentParser:
    """The build script's parser, its defaults taken from `environ` (BuildError for a refused variable)."""
    env = {name: from_env(name, parse, default, environ) for name, (parse, default) in ENV_OPTIONS.items()}
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--source-dir", default=os.getcwd(), help=f"unpacked {FLASH_ATTN.package} sdist (default: cwd)")
    p.add_argument(
        "--archs",
        default=env["FLASH_ATTN_CUDA_ARCHS"],
        help="SM list, e.g. '80;90;120+PTX' (env FLASH_ATTN_CUDA_ARCHS)",
    )
    p.add_argument(
        "--cxx11-abi",
        type=one_of("0", "1"),
        default=env["FAFORGE_CXX11_ABI"],
        help="forced _GLIBCXX_USE_CXX11_ABI (env FAFORGE_CXX11_ABI)",
    )
    p.add_argument("--build-dir", default=None, help="ninja object dir, kept for resuming (default: SOURCE/build)")
    p.add_argument("--wheel-dir", default=None, help="where the wheel goes (default: SOURCE/dist)")
    p.add_argument(
        "--max-jobs",
        type=positive_int,
        default=env["MAX_JOBS"],
        help="parallel nvcc jobs (env MAX_JOBS; default: derived from free memory)",
    )
    p.add_argument(
        "--nvcc-threads",
        type=positive_int,
        default=env["NVCC_THREADS"],
        help="nvcc --threads (env NVCC_THREADS, default 1)",
    )
    p.add_argument(
        "--compiler-cache",
        type=one_of(*COMPILER_CACHES),
        default=env["FAFORGE_COMPILER_CACHE"],
        help="put a compiler cache in front of nvcc (env "
        "FAFORGE_COMPILER_CACHE, default none); ccache reads CCACHE_DIR",
    )
    p.add_argument(
        "--checker-path",
        default=env["FAFORGE_CHECKER_PATH"],
        help="directory holding the faforge package (the build backend and the ABI "
        "check; default: faforge_checker/ beside this script, else the repo's)",
    )
    p.add_argument(
        "--only-tus",
        default=env["FAFORGE_BUILD_TUS"],
        help="compile only these kernel TUs (file names) and stop, for a split cell's piece (env FAFORGE_BUILD_TUS)",
    )
    p.add_argument(
        "--kernels-only",
        action="store_true",
        help=f"build only the kernel library (no torch needed; the recipe's {FLASH_ATTN.kernel_package})",
    )
    p.add_argument(
        "--install-lib-dir", default=None, help="with --kernels-only: copy the library here (the recipe: $PREFIX/lib)"
    )
    p.add_argument(
        "--philox-offset-bits",
        type=philox_bits,
        default=env["FAFORGE_PHILOX_OFFSET_BITS"],
        help="with --kernels-only: at::PhiloxCudaState's offset_intragraph_ "
        "width the library serves, 32 for torch <= 2.9, "
        "64 for torch >= 2.10 (env FAFORGE_PHILOX_OFFSET_BITS, default 64); other builds read it from torch",
    )
    p.add_argument(
        "--kernel-library",
        default=None,
        help=f"build only the glue, against this {FLASH_ATTN.kernel_library} (the recipe's {FLASH_ATTN.package})",
    )
    p.add_argument(
        "--torch-site",
        default=None,
        help="build the glue against the torch in this site-packages without importing it: "
        "a target this Python cannot run (linux-aarch64 on x86_64, with target_platform set); its version, folders and "
        "C++ ABI are read from its files, and the target's C++ compiler compiles it (faforge.backend.foreign)",
    )
    p.add_argument(
        "--python-include",
        action="append",
        default=None,
        help="with --torch-site: the target Python's header folders, "
        "Python.h's first (default: this Python's); repeatable, for Debian's multiarch pyconfig.h",
    )
    p.add_argument(
        "--python-library",
        default=None,
        help="with --torch-site: the target Python's shared libpython, linked only for "
        "--no-undefined (default: the one in lib/ or lib/<multiarch>/ of --python-include's prefix)",
    )
    p.add_argument(
        "--shim-dir", default=None, help="the torch shim (default: torch_shim/ beside this script, else the repo's)"
    )
    p.add_argument("--install", action="store_true", help="pip-install the wheel into this Python (the recipe's build)")
    p.add_argument("--plan-only", action="store_true", help="print the resolved build plan as JSON and stop")
    return p


def parse(description: str, argv: list[str] | None = None) -> argparse.Namespace:
    """The build's arguments, checked for the combinations no single option can refuse."""
    p = parser(description)
    args = p.parse_args(argv)
    if args.kernels_only and args.kernel_library:
        p.error("--kernels-only builds the library that --kernel-library names; pass one of them")
    if args.archs is None and not args.kernel_library:
        p.error("no arch list: pass --archs or set FLASH_ATTN_CUDA_ARCHS")
    if (args.python_include or args.python_library) and not args.torch_site:
        p.error("--python-include and --python-library go with --torch-site (the native build takes this Python's)")
    if args.torch_site and args.kernels_only:
        p.error("--torch-site is the glue's torch; --kernels-only builds no glue")
    if args.cxx11_abi is None and not args.kernels_only:
        p.error("no C++ ABI: pass --cxx11-abi 0|1 or set FAFORGE_CXX11_ABI")
    args.wheel_dir = args.wheel_dir or str(Path(args.source_dir) / "dist")
    return args
