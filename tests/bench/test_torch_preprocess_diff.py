"""Preprocessed-source comparison: line markers apart from code, torch headers named, diffs counted."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from faforge.bench import torch_preprocess_diff as torchdiff
from faforge.bench.torch_preprocess_diff import (
    count_diff,
    object_diff,
    sass_lines,
    source_diff,
    split_preprocessed,
    torch_headers,
)
from faforge.errors import FaforgeError

A = """# 1 "flash.cu"
# 1 "/h/lib/python3.11/site-packages/torch/include/c10/cuda/CUDAException.h" 1
void c10_check(int, const char*, const char*, unsigned, bool);

# 3 "flash.cu" 2
__global__ void k() {}
"""
B = """# 1 "flash.cu"
# 1 "/h2/lib/python3.12/site-packages/torch/include/c10/cuda/CUDAException.h" 1
struct CUDAErrorLogCapture;
void c10_check(int, const char*, const char*, unsigned, bool, CUDAErrorLogCapture*);
# 1 "/h2/lib/python3.12/site-packages/torch/include/c10/util/string.h" 1
# 3 "flash.cu" 2
__global__ void k() {}
"""


def test_split_keeps_code_and_lists_marked_files_once():
    code, files = split_preprocessed(A)
    assert code == ["void c10_check(int, const char*, const char*, unsigned, bool);", "__global__ void k() {}"]
    assert files == ["flash.cu", "/h/lib/python3.11/site-packages/torch/include/c10/cuda/CUDAException.h"]


def test_torch_headers_are_named_relative_to_the_include_dir():
    assert torch_headers(split_preprocessed(B)[1]) == ["c10/cuda/CUDAException.h", "c10/util/string.h"]


def test_source_diff_ignores_paths_and_counts_changed_code():
    d = source_diff(A, B)
    assert (d.lines_a, d.lines_b, d.removed, d.added) == (2, 3, 1, 2)
    assert (d.torch_headers_a, d.torch_headers_b) == (1, 2)
    assert source_diff(A, A.replace("python3.11", "python3.12")).changed_fraction == 0


def test_count_diff_on_equal_and_disjoint_inputs():
    assert count_diff(["a", "b"], ["a", "b"]) == (0, 0)
    assert count_diff(["a"], ["b", "c"]) == (1, 2)


def test_sass_of_an_object_and_of_a_bare_cubin_compare_equal():
    body = "\tcode for sm_80\n\t\tFunction : _Z1kPf\n        /*0000*/    MOV R1, c[0x0][0x28] ;\n"
    in_object = (
        "\nFatbin elf code:\n================\narch = sm_80\ncode version = [1,8]\nhost = linux\n"
        "compile_size = 64bit\n\n"
    ) + body
    in_cubin = "\n" + body
    assert sass_lines(in_object, "k.o") == sass_lines(in_cubin, "k.cubin") == body.strip("\n").splitlines()


def compile_kernel(tmp_path: Path, name: str, scale: str) -> Path:
    source = tmp_path / f"{name}.cu"
    source.write_text(f"__global__ void scale(float* x) {{ x[threadIdx.x] *= {scale}; }}\n")
    obj = tmp_path / f"{name}.o"
    subprocess.run(
        [shutil.which("nvcc") or "nvcc", "-gencode", "arch=compute_90,code=sm_90", "-c", str(source), "-o", str(obj)],
        check=True,
    )
    return obj


@pytest.mark.slow  # nvcc compiles
def test_object_diff_reads_the_sass_of_real_nvcc_objects(tmp_path):
    """cuobjdump -sass runs nvdisasm, which neither the toolkit here nor cuobjdump's wheel ships: torchdiff
    finds it as it finds cuobjdump (the split build's evidence run stopped with a CalledProcessError)."""
    a, same, other = (
        compile_kernel(tmp_path, "a", "2.0f"),
        compile_kernel(tmp_path, "same", "2.0f"),
        compile_kernel(tmp_path, "b", "3.0f"),
    )
    equal = object_diff(a, same)
    assert (
        equal.kernels == 1
        and equal.sass_lines_a > 5
        and (equal.sass_removed, equal.sass_added) == (0, 0)
        and equal.cubins_equal
    )
    changed = object_diff(a, other)
    assert changed.sass_removed >= 1 and changed.sass_added >= 1 and not changed.cubins_equal


def test_a_missing_cuda_tool_is_named_with_the_wheel_that_has_it(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(torchdiff.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FaforgeError, match="nvdisasm not found") as caught:
        torchdiff.sass(Path("k.o"))
    assert "pip install nvidia-cuda-nvdisasm" in caught.value.hint
