"""recipes/flash-attn/build_flash_attn.py: arch lists, C++ standard, MAX_JOBS policy, CLI errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faforge import build_script, paths

build = build_script.load()
SCRIPT = paths.recipe_dir() / "build_flash_attn.py"


def test_arch_list_parsing_and_gencode():
    archs = build.parse_arch_list("80;90;120+PTX")
    assert archs == [(80, False), (90, False), (120, True)]
    assert build.gencode_flags(archs) == [
        "-gencode", "arch=compute_80,code=sm_80",
        "-gencode", "arch=compute_90,code=sm_90",
        "-gencode", "arch=compute_120,code=sm_120",
        "-gencode", "arch=compute_120,code=compute_120",
    ]


@pytest.mark.parametrize(
    ("archs", "nvcc", "message"),
    [
        ("70;80", (12, 4), "sm_70: flash-attn 2 kernels need sm_80"),
        ("80;100", (12, 6), "sm_100 needs nvcc 12.8 or newer, this one is 12.6"),
        ("80;120+PTX", (12, 4), "sm_120 needs nvcc 12.8"),
        ("eighty", (13, 0), "'eighty' is not an SM number"),
    ],
)
def test_unsupported_archs_are_refused_with_the_reason(archs, nvcc, message):
    with pytest.raises(build.BuildError, match=message):
        build.check_archs_supported(build.parse_arch_list(archs), nvcc)


def test_every_matrix_arch_list_fits_its_cuda(repo):
    from faforge.matrix import load_matrix

    for cell in load_matrix(repo).cells:
        nvcc = tuple(int(x) for x in cell.cuda.split("."))
        build.check_archs_supported(build.parse_arch_list(cell.cuda_archs), nvcc)


@pytest.mark.parametrize(("torch", "std"), [("2.4.1", "c++17"), ("2.13.0", "c++17"), ("2.14.1+cu130", "c++20"), ("2.15.0", "c++20"), ("3.0.0", "c++20")])
def test_cxx_standard_follows_torch_headers(torch, std):
    assert build.cxx_standard(torch) == std


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
    assert build.derive_max_jobs(mem_gb=32, cpus=8, n_archs=4, nvcc_threads=4) < build.derive_max_jobs(mem_gb=32, cpus=8, n_archs=4, nvcc_threads=1) * 4


def test_missing_arch_list_and_abi_are_usage_errors():
    env = {"PATH": "/usr/bin:/bin"}
    no_archs = subprocess.run([sys.executable, str(SCRIPT), "--cxx11-abi", "1"], capture_output=True, text=True, env=env)
    assert no_archs.returncode == 2 and "no arch list" in no_archs.stderr and "Traceback" not in no_archs.stderr
    no_abi = subprocess.run([sys.executable, str(SCRIPT), "--archs", "90"], capture_output=True, text=True, env=env)
    assert no_abi.returncode == 2 and "no C++ ABI" in no_abi.stderr


def test_missing_source_and_missing_torch_are_one_line_errors(tmp_path):
    """The README's outside-conda build line, run before the sdist is unpacked or in a Python without torch."""
    env = {"PATH": "/usr/bin:/bin", "FLASH_ATTN_CUDA_ARCHS": "80;90"}
    common = ["--cxx11-abi", "1", "--build-dir", str(tmp_path / "build"), "--wheel-dir", str(tmp_path / "dist")]
    missing = subprocess.run([sys.executable, str(SCRIPT), "--source-dir", str(tmp_path / "flash_attn-2.8.3.post2"), *common],
                             capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert f"--source-dir {tmp_path / 'flash_attn-2.8.3.post2'}: no such folder; unpack the flash-attn sdist" in missing.stderr
    if subprocess.run([sys.executable, "-I", "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip(f"{sys.executable} has a torch; this case wants a Python without one")
    (tmp_path / "src").mkdir()
    no_torch = subprocess.run([sys.executable, "-I", str(SCRIPT), "--source-dir", str(tmp_path / "src"), *common],
                              capture_output=True, text=True, env=env)
    assert no_torch.returncode == 2 and "Traceback" not in no_torch.stderr
    assert f"torch does not import in {sys.executable}" in no_torch.stderr


def test_a_kernel_library_without_a_layout_symbol_is_refused_naming_it():
    """--kernel-library pointing at some other shared library (here CPython's own libpython, a real ELF
    file nobody here built) is named as not a kernel library, before anything compiles."""
    import sysconfig  # noqa: PLC0415

    libpython = Path(sysconfig.get_config_var("LIBDIR")) / sysconfig.get_config_var("LDLIBRARY")
    if not libpython.is_file():
        pytest.skip(f"this Python has no shared libpython ({libpython})")
    with pytest.raises(build.BuildError, match=r"defines no flash_attn_kernels_philox_offset_intragraph_u32/u64 symbol") as caught:
        build.check_kernel_library_layout(libpython, 64, "2.14.1")
    assert str(libpython) in str(caught.value) and "--kernels-only" in str(caught.value)
