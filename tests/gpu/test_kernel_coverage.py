"""Which kernel TUs the GPU suite launches, computed without a GPU by emulating flash_api.cpp's dispatch,
checked against the real flash-attn 2.8.3.post2 sources (flash_api.cpp compiled with g++, its TU files)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from faforge.gpu.coverage import compare, format_coverage
from faforge.gpu.dispatch import (
    API_DENSE,
    H200_SMS,
    Call,
    forward_launch,
    kernel_dim,
    num_splits_heuristic,
    package_tus,
    tu_of_kernel,
)
from faforge.gpu.suite import cases
from faforge.kernels.tus import HEAD_DIMS, sdist_tus
from tests.gpu.flash_attn_sdist import SdistUnavailable, flash_attn_sdist
from tests.support.tiers import slow


@pytest.fixture(scope="module")
@slow("the flash-attn sdist from PyPI")
def sdist() -> Path:
    try:
        return flash_attn_sdist()
    except SdistUnavailable as exc:
        pytest.skip(str(exc))


def test_every_package_tu_is_launched_on_an_h200():
    by_tu = cases.launched_tus(cases.launch_table(HEAD_DIMS, H200_SMS))
    assert set(by_tu) == set(package_tus()), f"never launched: {sorted(set(package_tus()) - set(by_tu))}"
    assert len(package_tus()) == 72


def test_the_package_tu_list_is_the_sdists(sdist):
    assert sorted(package_tus()) == sorted(tu.name.removesuffix(".cu") for tu in sdist_tus(sdist))


def test_block_aligned_cases_reach_both_branches_of_each_forward_tu_class():
    """Is_even_MN picks another template inside a TU: the suite reaches it and its ragged twin."""
    launches = [launch for found in cases.launch_table(HEAD_DIMS).values() for launch in found]
    for tu_class in ("flash_fwd_hdim", "flash_fwd_split_hdim"):
        branches = {launch.even_mn for launch in launches if launch.tu.startswith(tu_class)}
        assert branches == {True, False}, tu_class


def test_the_reviews_finding_is_reproduced():
    """The old dense shape (2 x 4 heads, 113 x 203) on 132 SMs: split-KV from hdim 96 on (kernel coverage)."""
    for dim in HEAD_DIMS:
        tu = forward_launch(Call(API_DENSE, "fp16", dim, 2, 4, 4, 113, 203)).tu
        assert tu.startswith("flash_fwd_split_" if dim >= 96 else "flash_fwd_hdim"), (dim, tu)
    # With dropout the split kernel is never used (SplitKV is not implemented for dropout).
    assert (
        forward_launch(Call(API_DENSE, "fp16", 128, 2, 4, 4, 113, 203, dropout_p=0.1)).tu
        == "flash_fwd_hdim128_fp16_sm80"
    )


def test_a_causal_window_runs_the_non_causal_tu():
    call = cases.masks_and_biases()["fp16-sliding-window-causal"]
    assert forward_launch(call).tu == "flash_fwd_split_hdim96_fp16_sm80"


def test_kernel_dim_matches_headdim_switch(sdist):
    """HEADDIM_SWITCH in static_switch.h, after padding to a multiple of 8, for every head dim up to 256."""
    switch = (sdist / "csrc/flash_attn/src/static_switch.h").read_text()
    bounds = [int(b) for b in re.findall(r"HEADDIM <= (\d+)", switch)]
    assert tuple(bounds) == HEAD_DIMS
    for head_dim in range(1, 257):
        padded = -(-head_dim // 8) * 8
        assert kernel_dim(head_dim) == next(b for b in bounds if padded <= b), head_dim


HEURISTIC_MAIN = """
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
%s
int main() {
    int bnm, sms, nblocks;
    while (std::scanf("%%d %%d %%d", &bnm, &sms, &nblocks) == 3)
        std::printf("%%d\\n", num_splits_heuristic(bnm, sms, nblocks, 128));
}
"""


@pytest.mark.slow  # a g++ compile
def test_num_splits_heuristic_matches_flash_api_cpp(sdist, tmp_path):
    """flash_api.cpp's own num_splits_heuristic, cut out of the sdist and compiled, against the emulation."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed; flash_api.cpp's heuristic is compiled with it")
    source = (sdist / "csrc/flash_attn/flash_api.cpp").read_text()
    function = re.search(r"^inline int num_splits_heuristic\(.*?^}\n", source, re.MULTILINE | re.DOTALL).group(0)
    (tmp_path / "h.cpp").write_text(HEURISTIC_MAIN % function)
    subprocess.run([gxx, "-O0", "-o", tmp_path / "h", tmp_path / "h.cpp"], check=True)
    grid = [
        (bnm, sms, n)
        for bnm in (1, 2, 5, 8, 16, 24, 48, 64, 100, 200, 211, 212, 256)
        for sms in (216, 228, 264)
        for n in (1, 2, 3, 4, 7, 16, 33, 64)
    ]
    result = subprocess.run(
        [tmp_path / "h"],
        input="\n".join(" ".join(map(str, g)) for g in grid),
        capture_output=True,
        text=True,
        check=True,
    )
    expected = [int(line) for line in result.stdout.split()]
    assert [num_splits_heuristic(bnm, sms, n, 128) for bnm, sms, n in grid] == expected
    assert len(set(expected)) > 3  # the grid exercises more than the trivial answers


KERNEL_NAMES = """
namespace cutlass { struct half_t {}; struct bfloat16_t {}; }
template <int D, int M, int N, int W, typename T> struct Flash_kernel_traits {};
template <int D, int M, int N, int W, bool A, bool B, typename T, typename Base = Flash_kernel_traits<D, M, N, W, T> >
struct Flash_fwd_kernel_traits {};
template <int D, int M, int N, int W, int A1, int A2, int A3, bool V, bool DB, typename T,
          typename Base = Flash_kernel_traits<D, M, N, W, T> > struct Flash_bwd_kernel_traits {};
namespace flash {
struct Flash_fwd_params {}; struct Flash_bwd_params {};
template <typename K, bool Is_dropout, bool Is_causal, bool Is_local, bool Has_alibi, bool Is_even_MN, bool Is_even_K,
          bool Is_softcap, bool Return_softmax> void flash_fwd_kernel(Flash_fwd_params) {}
template <typename K, bool Is_causal, bool Is_local, bool Has_alibi, bool Is_even_MN, bool Is_even_K, bool Is_softcap,
          bool Split, bool Append_KV> void flash_fwd_splitkv_kernel(Flash_fwd_params) {}
template <typename K, int kBlockM, int Log_max_splits, bool Is_even_K>
void flash_fwd_splitkv_combine_kernel(Flash_fwd_params) {}
template <typename K, bool Is_dropout, bool Is_causal, bool Is_local, bool Has_alibi, bool Is_even_MN, bool Is_even_K,
          bool Is_softcap> void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel(Flash_bwd_params) {}
template void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t>,
                               false, true, false, false, true, true, false, false>(Flash_fwd_params);
template void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t>,
                               true, false, false, false, false, true, false, true>(Flash_fwd_params);
template void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<32, 64, 256, 4, false, false, cutlass::bfloat16_t>,
                                       true, false, false, false, true, false, true, false>(Flash_fwd_params);
template void flash_fwd_splitkv_combine_kernel<
    Flash_fwd_kernel_traits<32, 64, 256, 4, false, false, cutlass::bfloat16_t>, 8, 1, true>(Flash_fwd_params);
template void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<
    Flash_bwd_kernel_traits<256, 64, 64, 8, 4, 2, 2, false, true, cutlass::half_t>,
    false, true, false, false, false, true, false>(Flash_bwd_params);
}
"""


@pytest.mark.slow  # a g++ compile
def test_tu_of_kernel_reads_demangled_kernel_names(tmp_path):
    """Kernel templates shaped like flash-attn's (flash_fwd_launch_template.h, kernel_traits.h), compiled with
    g++ and demangled by c++filt: the format torch.profiler shows (it demangles with the same ABI)."""
    gxx, cxxfilt, nm = shutil.which("g++"), shutil.which("c++filt"), shutil.which("nm")
    if not (gxx and cxxfilt and nm):
        pytest.skip("g++, nm and c++filt (binutils) are needed to make real mangled kernel names")
    (tmp_path / "k.cpp").write_text(KERNEL_NAMES)
    subprocess.run([gxx, "-c", "-o", tmp_path / "k.o", tmp_path / "k.cpp"], check=True)
    symbols = subprocess.run(
        [nm, "--defined-only", "-C", tmp_path / "k.o"], capture_output=True, text=True, check=True
    ).stdout
    names = [line.split(" ", 2)[2] for line in symbols.splitlines() if "flash::flash_" in line]
    found = {
        name.split("<", 1)[0].split("::")[-1] + ("#combine" if "combine" in name else ""): tu_of_kernel(name)
        for name in names
    }
    assert sorted(map(tu_of_kernel, names), key=str) == sorted(
        [
            "flash_fwd_hdim128_fp16_causal_sm80",
            "flash_fwd_hdim64_bf16_sm80",
            "flash_fwd_split_hdim32_bf16_causal_sm80",
            "flash_bwd_hdim256_fp16_causal_sm80",
            None,  # the combine kernel has no Is_causal: shared by two TUs, not attributed
        ],
        key=str,
    ), found


def test_coverage_report_names_unseen_tus_and_dispatch_surprises():
    table = cases.launch_table(HEAD_DIMS, 132)
    observed = {test: sorted({launch.tu for launch in launches}) for test, launches in table.items()}
    observed["test_attention.py::test_dense[fp16-hdim256-aligned-full]"] = ["flash_bwd_hdim256_fp16_sm80"]
    for test in [t for t, tus in observed.items() if "flash_fwd_hdim256_fp16_sm80" in tus]:
        observed[test] = [tu for tu in observed[test] if tu != "flash_fwd_hdim256_fp16_sm80"]
    coverage = compare({"sms": 132, "tests": observed}, HEAD_DIMS)
    assert coverage["never_seen"] == ["flash_fwd_hdim256_fp16_sm80"]
    assert len(coverage["seen_tus"]) == 71 and coverage["package_tus"] == 72
    assert {m["test"] for m in coverage["mismatches"]} >= {"test_attention.py::test_dense[fp16-hdim256-aligned-full]"}
    lines = format_coverage(coverage)
    assert lines[0] == "kernel TUs seen by the profiler: 71 of 72 (132 SMs)"
    assert lines[1] == "never launched: flash_fwd_hdim256_fp16_sm80"
