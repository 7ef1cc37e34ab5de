"""The kernel library's build plan: what the build resolved from its arguments and this machine,
printed before anything compiles (and alone with --plan-only)."""

from __future__ import annotations

import os
from pathlib import Path

from faforge.backend.archs import Arch, arch_names, check_archs_supported
from faforge.backend.flags import KERNEL_CXX_STD
from faforge.backend.jobs import available_memory_gb, derive_max_jobs
from faforge.backend.sources import kernel_sources, sdist_version, select_kernels
from faforge.backend.toolchain import find_cuda_home, nvcc_version
from faforge.family import FLASH_ATTN


def kernel_plan(
    *,
    source_dir: Path,
    archs: list[Arch],
    nvcc_threads: int,
    max_jobs: int | None,
    compiler_cache: str,
    only_tus: str | None,
) -> tuple[dict, int]:
    """The plan and the job count (`max_jobs`, else what the memory holds)."""
    nvcc = nvcc_version(str(Path(find_cuda_home()) / "bin" / "nvcc"))
    check_archs_supported(archs, nvcc)
    max_jobs = max_jobs or derive_max_jobs(available_memory_gb(), os.cpu_count() or 1, len(archs), nvcc_threads)
    only = select_kernels(kernel_sources(source_dir), only_tus) if only_tus is not None else None
    return {
        FLASH_ATTN.module: sdist_version(source_dir),
        "nvcc": f"{nvcc[0]}.{nvcc[1]}",
        "archs": arch_names(archs),
        "kernel_cxx_std": KERNEL_CXX_STD,
        "max_jobs": max_jobs,
        "nvcc_threads": nvcc_threads,
        "compiler_cache": compiler_cache,
        "only_tus": len(only) if only else "all",
    }, max_jobs
