"""How many nvcc jobs run at once: as many as the CPUs allow and the memory holds at the worst TU."""

from __future__ import annotations

from pathlib import Path

from faforge.backend.errors import BuildError

# Peak RSS of one nvcc job compiling one arch at --threads 1, in GB, measured
# on the 2-core build host with nvcc 13.0 and torch 2.14.1 headers (see
# variants/README.md, "Build cost"): fwd 4.4, fwd_split 4.1, bwd 6.4. bwd hdim256
# is the worst TU; it is estimated 15% above the measured bwd hdim128.
WORST_CASE_GB_PER_JOB = 6.4 * 1.15
# nvcc --threads N compiles up to N archs of one TU at once; each extra
# concurrent arch adds about 0.8 x the single-arch peak again.
CONCURRENT_ARCH_FACTOR = 0.8
# Leave room for the linker, ninja and the OS.
RESERVED_GB = 2.0


def available_memory_gb() -> float:
    """MemAvailable, capped by a cgroup v2/v1 memory limit (CI containers)."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and int(raw) < (1 << 60):
            avail = min(avail or int(raw), int(raw))
    if avail is None:
        raise BuildError("cannot read available memory from /proc/meminfo; set MAX_JOBS explicitly")
    return avail / 1e9


def derive_max_jobs(
    mem_gb: float, cpus: int, n_archs: int, nvcc_threads: int, worst_gb: float = WORST_CASE_GB_PER_JOB
) -> int:
    """Parallel nvcc jobs that fit in memory at the worst-case TU (flash-attn 2's bwd hdim256 unless the
    family names its own `worst_gb`)."""
    concurrent_archs = max(1, min(nvcc_threads, n_archs))
    per_job = worst_gb * (1 + (concurrent_archs - 1) * CONCURRENT_ARCH_FACTOR)
    by_memory = int((mem_gb - RESERVED_GB) // per_job)
    by_cpu = max(1, cpus // max(1, nvcc_threads))
    return max(1, min(by_memory, by_cpu))
