"""Which kernel TUs a flash-attn call launches: flash_api.cpp's dispatch, emulated for one GPU.

flash-attn 2.8.3.post2 compiles 72 kernel translation units (csrc/flash_attn/src/flash_{fwd,fwd_split,bwd}_
hdim{32..256}_{fp16,bf16}[_causal]_sm80.cu). Which one a call reaches is decided on the host, in
csrc/flash_attn/flash_api.cpp and src/flash_fwd_launch_template.h, from the shapes and the GPU's SM count:

* the head dim is padded to a multiple of 8, then rounded up to a kernel dim (HEADDIM_SWITCH, static_switch.h);
* `causal` is dropped for one query row (without ALiBi) and a window becomes `is_causal` only when it is
  (-1, 0) after clamping, so a causal call with a left window runs the non-causal TU's local kernel;
* one query row with more query than k/v heads swaps heads into the query length (seqlenq_ngroups_swapped);
* the forward picks the split-KV TU when num_splits_heuristic() returns more than one split (dense calls
  without dropout, varlen decode, KV cache) or the split kernel is forced (KV cache appending keys, with
  cache_batch_idx or a block table; varlen with a block table);
* inside a TU, `Is_even_MN` (both lengths multiples of the kernel's block sizes) picks another template.

The suite's test cases (faforge.gpu.suite.cases) are described as `Call`s, so the table of TUs each test
launches is computed here and checked against the package's TU list without a GPU; on a GPU the suite
confirms it from the profiler's kernel names (`tu_of_kernel`). Standard library only.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from faforge.family import FLASH_ATTN
from faforge.kernels.tus import HEAD_DIMS, default_grid

# An H200 (and H100 SXM) has 132 SMs; the GPU suite passes the real count from torch.
H200_SMS = 132
API_DENSE, API_VARLEN, API_KVCACHE = "dense", "varlen", "kvcache"
# flash_fwd_launch_template.h on sm_90 (not sm8x): (kBlockM, kBlockN) of run_mha_fwd_hdim{d}, without and with
# dropout. hdim256 picks 64 x 64 where an SM has room for two CTAs of it (H100/H200: 228 KB shared memory per SM).
FWD_BLOCKS = {
    32: ((128, 128), (128, 128)),
    64: ((128, 128), (128, 64)),
    96: ((128, 64), (128, 64)),
    128: ((128, 64), (128, 32)),
    192: ((128, 64), (64, 64)),
    256: ((64, 64), (64, 64)),
}
SPLIT_BLOCK_M = 64  # run_mha_fwd_splitkv_dispatch: kBlockM fixed; kBlockN below


def split_block_n(kernel_dim: int) -> int:
    """kBlockN of the split-KV kernel (and of set_params_splitkv's block count)."""
    return 256 if kernel_dim <= 64 else (128 if kernel_dim <= 128 else 64)


@dataclass(frozen=True)
class Call:
    """One flash-attn call as the suite makes it; lengths are the maxima for varlen, the cache capacity for kvcache."""

    api: str
    dtype: str  # "fp16" or "bf16"
    head_dim: int
    batch: int
    heads: int
    kv_heads: int
    seqlen_q: int
    seqlen_k: int
    causal: bool = False
    window: tuple[int, int] = (-1, -1)
    dropout_p: float = 0.0
    softcap: float = 0.0
    alibi: bool = False
    backward: bool = True
    append_kv: bool = False  # kvcache: k/v to append given
    cache_batch_idx: bool = False
    paged: bool = False  # a block_table (kvcache, varlen)
    num_splits: int = 0  # kvcache's argument; 0 lets the heuristic decide


@dataclass(frozen=True)
class Launch:
    """A kernel TU a call reaches, and the template branch inside it that depends on block alignment."""

    tu: str  # "flash_fwd_split_hdim128_bf16_causal_sm80"
    even_mn: bool
    splits: int = 1


def kernel_dim(head_dim: int) -> int:
    """HEADDIM_SWITCH after padding to a multiple of 8 (flash_attn_interface.py pads, mha_fwd_kvcache rounds)."""
    padded = -(-head_dim // 8) * 8
    for dim in HEAD_DIMS:
        if padded <= dim:
            return dim
    raise ValueError(f"head dim {head_dim} > {HEAD_DIMS[-1]}: {FLASH_ATTN.package} 2 has no kernel for it")


def _f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def num_splits_heuristic(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int) -> int:
    """flash_api.cpp's num_splits_heuristic, line for line (float arithmetic in single precision)."""
    if batch_nheads_mblocks >= _f32(0.8 * num_sms):
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def eligible(splits: int) -> bool:
        return splits == 1 or -(-num_n_blocks // splits) != -(-num_n_blocks // (splits - 1))

    efficiency = {}
    for splits in range(1, max_splits + 1):
        if eligible(splits):
            waves = _f32(batch_nheads_mblocks * splits / num_sms)
            efficiency[splits] = _f32(waves / float(-(-waves // 1)))
    best = max(efficiency.values(), default=0.0)
    return next((s for s, eff in efficiency.items() if eff >= 0.85 * best), 1)


def _splits(call: Call, dim: int, seqlen_q: int, heads: int, num_sms: int) -> int:
    """set_params_splitkv: the heuristic runs with twice the SMs (128 threads per block)."""
    n_blocks = -(-call.seqlen_k // split_block_n(dim))
    m_blocks = -(-seqlen_q // 64)
    return num_splits_heuristic(call.batch * heads * m_blocks, num_sms * 2, n_blocks, 128)


def forward_launch(call: Call, num_sms: int = H200_SMS) -> Launch:
    """The forward TU: mha_fwd / mha_varlen_fwd / mha_fwd_kvcache up to run_mha_fwd."""
    dim = kernel_dim(call.head_dim)
    padded = -(-call.head_dim // 8) * 8
    left, right = call.window
    causal = call.causal and not (call.seqlen_q == 1 and not call.alibi)
    if causal:
        right = 0
    left, right = (-1 if left >= call.seqlen_k else left), (-1 if right >= call.seqlen_k else right)
    seqlen_q, heads = call.seqlen_q, call.heads
    if (
        call.seqlen_q == 1
        and call.heads > call.kv_heads
        and left < 0
        and right < 0
        and call.dropout_p == 0
        and not call.alibi
    ):
        seqlen_q, heads = call.heads // call.kv_heads, call.kv_heads
    is_causal = left < 0 and right == 0
    local = (left >= 0 or right >= 0) and not is_causal
    if call.api == API_DENSE:
        splits, forced = (_splits(call, dim, seqlen_q, heads, num_sms) if call.dropout_p == 0 else 0), False
    elif call.api == API_VARLEN:
        swapped = seqlen_q != call.seqlen_q
        splits, forced = (_splits(call, dim, seqlen_q, heads, num_sms) if swapped else 0), call.paged
    else:
        splits = call.num_splits if call.num_splits >= 1 else _splits(call, dim, seqlen_q, heads, num_sms)
        forced = call.append_kv or call.cache_batch_idx or call.paged
    # cu_seqlens: varlen always, kvcache with cache_seqlens (the suite always passes them)
    aligned_api = call.api == API_DENSE
    even_k = padded == dim
    causal_part = "_causal" if is_causal else ""
    if splits > 1 or forced:
        block_n = split_block_n(dim)
        even_mn = aligned_api and call.seqlen_k % block_n == 0 and seqlen_q % SPLIT_BLOCK_M == 0
        even_mn = even_mn and not call.append_kv and even_k and not local and not call.alibi and dim <= 128
        return Launch(f"flash_fwd_split_hdim{dim}_{call.dtype}{causal_part}_sm80", even_mn, max(splits, 1))
    block_m, block_n = FWD_BLOCKS[dim][call.dropout_p > 0]
    even_mn = aligned_api and call.seqlen_k % block_n == 0 and seqlen_q % block_m == 0
    even_mn = even_mn and even_k and not local and not call.alibi and dim <= 128  # the suite never returns probs here
    return Launch(f"flash_fwd_hdim{dim}_{call.dtype}{causal_part}_sm80", even_mn)


def backward_launch(call: Call) -> Launch | None:
    """The backward TU (mha_bwd / mha_varlen_bwd: no one-row or head-swap special case), or None without one."""
    if not call.backward or call.api == API_KVCACHE:
        return None
    left, right = call.window
    if call.causal:
        right = 0
    left, right = (-1 if left >= call.seqlen_k else left), (-1 if right >= call.seqlen_k else right)
    causal_part = "_causal" if left < 0 and right == 0 else ""
    return Launch(f"flash_bwd_hdim{kernel_dim(call.head_dim)}_{call.dtype}{causal_part}_sm80", even_mn=False)


def launches(call: Call, num_sms: int = H200_SMS) -> tuple[Launch, ...]:
    backward = backward_launch(call)
    return (forward_launch(call, num_sms),) + ((backward,) if backward else ())


def package_tus() -> tuple[str, ...]:
    """The kernel TUs every cell's build compiles (the sdist's csrc/flash_attn/src/flash_*_sm80.cu, without .cu)."""
    return tuple(sorted(tu.name.removesuffix(".cu") for tu in default_grid()))


# Kernel names as torch.profiler shows them (demangled), e.g.
#   void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t,
#     Flash_kernel_traits<128, 128, 64, 4, cutlass::half_t> >, false, true, false, ...>(flash::Flash_fwd_params)
# The bool after the traits that is Is_causal: flash_fwd_kernel<Traits, Is_dropout, Is_causal, ...>,
# flash_fwd_splitkv_kernel<Traits, Is_causal, ...>, flash_bwd_dq_dk_dv_loop[_seqk_parallel]_kernel<Traits,
# Is_dropout, Is_causal, ...> (flash_bwd_launch_template.h). Other kernels (combine, dot_do_o, convert_dq)
# have no Is_causal and are shared by a causal and a non-causal TU: they are not attributed.
_KERNEL = re.compile(
    r"(?P<kind>flash_fwd_kernel|flash_fwd_splitkv_kernel|flash_bwd_dq_dk_dv_loop(?:_seqk_parallel)?_kernel)"
    r"<(?:\w+::)*Flash_(?:fwd|bwd)_kernel_traits<(?P<dim>\d+),[^>]*?cutlass::(?P<dtype>half_t|bfloat16_t)"
)
_CAUSAL_POSITION = {"flash_fwd_kernel": 1, "flash_fwd_splitkv_kernel": 0}
_TU_CLASS = {"flash_fwd_kernel": "fwd", "flash_fwd_splitkv_kernel": "fwd_split"}


def tu_of_kernel(name: str) -> str | None:
    """The TU a profiled kernel name comes from, or None for kernels that do not identify one."""
    match = _KERNEL.search(name)
    if not match:
        return None
    rest = name[match.end() :]
    depth, i = 1, 0  # skip to the end of the traits' template argument list
    while depth and i < len(rest):
        depth += {"<": 1, ">": -1}.get(rest[i], 0)
        i += 1
    bools = re.findall(r"\b(true|false)\b", rest[i:].split(">(")[0])
    position = _CAUSAL_POSITION.get(match["kind"], 1)
    if len(bools) <= position:
        return None
    dtype = {"half_t": "fp16", "bfloat16_t": "bf16"}[match["dtype"]]
    tu_class = _TU_CLASS.get(match["kind"], "bwd")
    causal = "_causal" if bools[position] == "true" else ""
    return f"flash_{tu_class}_hdim{match['dim']}_{dtype}{causal}_sm80"
