"""One compiler cache for the glue's C++ compiles of a test run.

Every real build of the tiny sdist (tests/recipe/test_build_script_real.py and the tests importing its
build_python) compiles the same flash_api.cpp and torch_cuda_check.cpp against the same torch with
the same flags, about two minutes of g++ on torch's headers each time. torch's ninja file compiles
them with `c++` from PATH (cpp_extension.get_cxx_compiler, when CXX is unset); a `c++` that runs the
real one through ccache makes the first compile of each flag set in a run real and the repeats hits.
The link, the ABI checks and the wheel still run for real in every build.

The cache is the run's own (under pytest's basetemp), apart from any CCACHE_DIR a test gives the
build script: the tests that count the kernel library's hits and misses see only their own cache.
"""

from __future__ import annotations

import shlex
from pathlib import Path

# ccache settings the build script exports for its kernel compiles (faforge.backend.ccache.ccache_env);
# the wrapper replaces them with its own, so that the glue's cache never depends on the build's mode.
BUILD_SCRIPT_SETTINGS = ("CCACHE_COMPILERCHECK", "CCACHE_SLOPPINESS")


def cxx_through_ccache(run_dir: Path, base_dir: Path, ccache: str, cxx: str) -> Path:
    """A folder holding `c++`, which runs `cxx` through `ccache` with the cache in run_dir/ccache and
    paths under base_dir (the builds' tmp dirs) hashed relative to the compile's directory; put it first on PATH."""
    bin_dir = run_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "c++"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# tests/support/compile_cache.py: the glue's C++ compiles of one test run, through one ccache.\n"
        f"unset {' '.join(BUILD_SCRIPT_SETTINGS)}\n"
        f"export CCACHE_DIR={shlex.quote(str(run_dir / 'ccache'))} "
        f"CCACHE_BASEDIR={shlex.quote(str(base_dir))} CCACHE_NOHASHDIR=1\n"
        f'exec {shlex.quote(ccache)} {shlex.quote(cxx)} "$@"\n'
    )
    wrapper.chmod(0o755)
    return bin_dir
