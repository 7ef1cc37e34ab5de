"""FA3's KV-cache calls (flash_attn_with_kvcache: per-sequence lengths, appended keys, a paged cache) and
the scheduler metadata kernel, where the package's declaration says the binary holds them.

Upstream's rule for the KV cache (hopper/test_flash_attn.py L1048-L1049): 2x PyTorch's own error in the
input precision, plus 1e-5.
"""

from __future__ import annotations

import math

from faforge.families.flash_attn_3.gpu_gate import evaluate
from faforge.families.flash_attn_3.gpu_suite import gate_marks, needs

pytestmark = gate_marks()
GATE = evaluate()
if GATE.usable:
    import torch
    from flash_attn_interface import flash_attn_with_kvcache, get_scheduler_metadata

    from faforge.families.flash_attn_3.gpu_suite.harness import BATCH, DEVICE, DTYPES, HEADS
    from faforge.gpu.reference import attention_ref


def kvcache_case(paged: bool, append: bool) -> None:
    """flash_attn_with_kvcache: per-sequence cache lengths (seqused_k), optionally new keys appended and a
    paged cache (page_table), against the reference over the cache as it is after the call."""
    torch.manual_seed(0)
    dim, dtype, seqlen_cache, new = GATE.head_dims[0], DTYPES["bf16"], 512, 7 if append else 0
    q = torch.randn(BATCH, 3, HEADS, dim, device=DEVICE, dtype=dtype)
    cache_seqlens = torch.tensor([100, 377], dtype=torch.int32, device=DEVICE)
    k_cache, v_cache = (torch.randn(BATCH, seqlen_cache, 2, dim, device=DEVICE, dtype=dtype) for _ in range(2))
    k_new, v_new = (
        (torch.randn(BATCH, new, 2, dim, device=DEVICE, dtype=dtype) for _ in range(2)) if append else (None, None)
    )
    call = {"cache_seqlens": cache_seqlens, "k": k_new, "v": v_new, "causal": True}
    if paged:
        page, pages_per_seq = 64, seqlen_cache // 64
        order = torch.randperm(BATCH * pages_per_seq, device=DEVICE)
        page_table = order.view(BATCH, pages_per_seq).to(torch.int32)
        paged_k, paged_v = (
            torch.empty(BATCH * pages_per_seq, page, 2, dim, device=DEVICE, dtype=dtype) for _ in range(2)
        )
        paged_k[order], paged_v[order] = (c.view(BATCH * pages_per_seq, page, 2, dim) for c in (k_cache, v_cache))
        out = flash_attn_with_kvcache(q, paged_k, paged_v, page_table=page_table, **call)
        k_cache, v_cache = (
            p[page_table.long().flatten()].view(BATCH, seqlen_cache, 2, dim) for p in (paged_k, paged_v)
        )
    else:
        out = flash_attn_with_kvcache(q, k_cache, v_cache, **call)
    used = cache_seqlens + new
    if k_new is not None and v_new is not None:  # appended
        for b in range(BATCH):
            start = int(cache_seqlens[b])
            assert torch.equal(k_cache[b, start : start + new], k_new[b]) and torch.equal(
                v_cache[b, start : start + new], v_new[b]
            ), "new keys not appended"
    mask = torch.arange(seqlen_cache, device=DEVICE)[None] < used[:, None]
    exact = attention_ref(q, k_cache, v_cache, causal=True, key_padding_mask=mask)
    same_precision = attention_ref(
        q, k_cache, v_cache, causal=True, key_padding_mask=mask, upcast=False, reorder_ops=True
    )
    error, yardstick = (
        (out.float() - exact.float()).abs().max().item(),
        (same_precision.float() - exact.float()).abs().max().item(),
    )
    assert math.isfinite(error) and error <= 2 * yardstick + 1e-5, (
        f"kvcache paged={paged} append={append}: error {error:.3g} > 2 x {yardstick:.3g} + 1e-5"
    )


@needs("VARLEN")
def test_kvcache():
    kvcache_case(paged=False, append=False)


@needs("VARLEN", "APPENDKV")
def test_kvcache_append():
    kvcache_case(paged=False, append=True)


@needs("VARLEN", "PAGEDKV")
def test_kvcache_paged():
    kvcache_case(paged=True, append=False)


def test_scheduler_metadata():
    """get_scheduler_metadata launches flash_prepare_scheduler.cu's kernel, which every build has (varlen and
    KV-cache calls use it; a build without varlen reaches it only this way). Per sequence it writes the
    split count and the query block count: plausible values, or the kernel did not run."""
    dim, seqlen_q = GATE.head_dims[0], 300
    cache_seqlens = torch.tensor([1000, 37], dtype=torch.int32, device=DEVICE)
    metadata = get_scheduler_metadata(
        BATCH, seqlen_q, 1024, HEADS, 2, dim, cache_seqlens, qkv_dtype=torch.bfloat16, causal=True
    )
    torch.cuda.synchronize()
    assert metadata.dtype == torch.int32 and metadata.numel() >= 2 * BATCH, metadata
    splits, m_blocks = (
        metadata[:BATCH].tolist(),
        metadata[4 : 4 + BATCH].tolist(),
    )  # b rounded up to 4 (flash_api_stable.cpp L693)
    assert all(1 <= s <= 256 for s in splits), f"num_splits per sequence {splits}: not written by the kernel"
    assert all(1 <= m <= seqlen_q * HEADS for m in m_blocks), (
        f"query blocks per sequence {m_blocks}: not written by the kernel"
    )
