"""faforge.backend.jobs: the MAX_JOBS policy from memory and CPUs."""

from __future__ import annotations

from faforge.backend import jobs as build
from faforge.families.flash_attn_3 import backend as fa3_backend


def test_max_jobs_never_oversubscribes_a_24_gib_2_core_runner():
    jobs = build.derive_max_jobs(mem_gb=24 * 1.073741824 - 1.5, cpus=2, n_archs=4, nvcc_threads=1)
    assert jobs == 2
    # Two worst-case jobs (bwd hdim256) plus the reserve stay inside 24 GiB.
    assert jobs * build.WORST_CASE_GB_PER_JOB + build.RESERVED_GB < 24 * 1.073741824


def test_max_jobs_is_memory_bound_on_small_boxes_and_cpu_bound_on_big_ones():
    assert build.derive_max_jobs(mem_gb=8, cpus=16, n_archs=1, nvcc_threads=1) == 1
    assert build.derive_max_jobs(mem_gb=512, cpus=16, n_archs=1, nvcc_threads=1) == 16
    assert build.derive_max_jobs(mem_gb=512, cpus=16, n_archs=4, nvcc_threads=4) == 4
    # nvcc --threads compiles archs side by side, so each job needs more memory.
    assert (
        build.derive_max_jobs(mem_gb=32, cpus=8, n_archs=4, nvcc_threads=4)
        < build.derive_max_jobs(mem_gb=32, cpus=8, n_archs=4, nvcc_threads=1) * 4
    )


def test_available_memory_is_read_from_this_machine():
    assert build.available_memory_gb() > 0


def test_fa3_budgets_its_own_worst_tu():
    """FA3's full-build sm80 TUs peak at 9.05 GB (variants/build-measurements.yaml, fa3_samples), above FA2's
    7.36 GB worst case: on a 64 GB, 16-core runner FA2's budget would start 8 jobs, 72 GB at FA3's peak."""
    assert fa3_backend.WORST_CASE_GB_PER_JOB >= 9.05
    fa3 = build.derive_max_jobs(
        mem_gb=64, cpus=16, n_archs=2, nvcc_threads=1, worst_gb=fa3_backend.WORST_CASE_GB_PER_JOB
    )
    assert fa3 * 9.05 + build.RESERVED_GB <= 64 and fa3 < build.derive_max_jobs(
        mem_gb=64, cpus=16, n_archs=2, nvcc_threads=1
    )
