"""One nvcc compile of one kernel TU, run the way torch's ninja file runs it, timed.

The command mirrors torch's `cuda_compile` ninja rule (torch/utils/cpp_extension.py,
_write_ninja_file and unix_cuda_flags, torch 2.11-2.14):
  $nvcc -MD -MF $out.d $cuda_cflags -c $in -o $out $cuda_post_cflags
with the include dirs and flags build_flash_attn.py gives the extension.  Wall time, CPU time
(user + system of nvcc and everything it ran) and the peak RSS of the largest process come from
wait4(); CPU time is the number to extrapolate from, because wall time depends on whatever else
the machine is doing.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from faforge.backend import archs as arch_lists
from faforge.backend import flags
from faforge.family import FLASH_ATTN

# torch.utils.cpp_extension.COMMON_NVCC_FLAGS and the -fPIC that unix_cuda_flags adds.
TORCH_NVCC_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__",
    "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-D__CUDA_NO_HALF2_OPERATORS__",
    "--expt-relaxed-constexpr",
    "--compiler-options",
    "-fPIC",
]
# BuildExtension adds these to every compile of the extension.
TORCH_EXTENSION_DEFINES = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={FLASH_ATTN.extension}"]


@dataclass(frozen=True)
class CompileSpec:
    """Everything about one kernel compile except where it runs."""

    archs: str  # "80" or "80;90;120+PTX"
    cxx_std: str  # "c++20"
    cxx11_abi: int
    nvcc_threads: int = 1


@dataclass(frozen=True)
class Timing:
    wall_s: float
    cpu_s: float
    peak_rss_gb: float
    returncode: int
    load_avg: float
    stderr_tail: str


def nvcc_command(
    nvcc_argv: list[str], source: Path, obj: Path, include_dirs: list[str], spec: CompileSpec, output_kind: str = "-c"
) -> list[str]:
    """`nvcc_argv` is $PYTORCH_NVCC split into words (possibly a launcher and nvcc) or [nvcc];
    `output_kind` "-cubin" stops after the device code, for SASS comparisons."""
    archs = arch_lists.parse_arch_list(spec.archs)
    return [
        *nvcc_argv,
        "-MD",
        "-MF",
        f"{obj}.d",
        *(f"-I{d}" for d in include_dirs),
        output_kind,
        str(source),
        "-o",
        str(obj),
        *TORCH_NVCC_FLAGS,
        *flags.NVCC_FLAGS,
        f"-std={spec.cxx_std}",
        f"-D_GLIBCXX_USE_CXX11_ABI={spec.cxx11_abi}",
        "--threads",
        str(spec.nvcc_threads),
        *arch_lists.gencode_flags(archs),
        *TORCH_EXTENSION_DEFINES,
    ]


def run_timed(command: list[str], cwd: Path, env: dict[str, str] | None, nice: int = 0) -> Timing:
    """Run `command` (under `nice -n NICE` when NICE > 0) and measure it with wait4()."""
    if nice:
        command = ["nice", "-n", str(nice), *command]
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None  # started with stderr=PIPE
    with proc.stderr:
        stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    return Timing(
        wall_s=round(wall, 1),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 1),
        peak_rss_gb=round(usage.ru_maxrss * 1024 / 1e9, 2),  # ru_maxrss is in KiB
        returncode=proc.returncode,
        load_avg=round(os.getloadavg()[0], 1),
        stderr_tail=stderr.decode(errors="replace")[-2000:],
    )
