"""Preprocessed-source comparison: line markers apart from code, torch headers named, diffs counted."""

from __future__ import annotations

from faforge.buildcost.torchdiff import count_diff, sass_lines, source_diff, split_preprocessed, torch_headers

A = '''# 1 "flash.cu"
# 1 "/h/lib/python3.11/site-packages/torch/include/c10/cuda/CUDAException.h" 1
void c10_check(int, const char*, const char*, unsigned, bool);

# 3 "flash.cu" 2
__global__ void k() {}
'''
B = '''# 1 "flash.cu"
# 1 "/h2/lib/python3.12/site-packages/torch/include/c10/cuda/CUDAException.h" 1
struct CUDAErrorLogCapture;
void c10_check(int, const char*, const char*, unsigned, bool, CUDAErrorLogCapture*);
# 1 "/h2/lib/python3.12/site-packages/torch/include/c10/util/string.h" 1
# 3 "flash.cu" 2
__global__ void k() {}
'''


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
    in_object = "\nFatbin elf code:\n================\narch = sm_80\ncode version = [1,8]\nhost = linux\ncompile_size = 64bit\n\n" + body
    in_cubin = "\n" + body
    assert sass_lines(in_object, "k.o") == sass_lines(in_cubin, "k.cubin") == body.strip("\n").splitlines()
