"""flash_attn_with_kvcache: appending in place, rotary, decoding with GQA, cache_batch_idx, a paged block
table, cache_leftpad, windows, softcap and ALiBi; upstream's test_flash_attn_kvcache semantics.

The cases are faforge.gpu.suite.cases.kvcache(); each names the dispatch Call it makes.
"""

from __future__ import annotations

import math

import pytest

from faforge.gpu.gate import evaluate
from faforge.gpu.suite import cases, gate_marks

pytestmark = gate_marks()
if evaluate().usable:
    import torch
    from flash_attn import flash_attn_with_kvcache

    from faforge.gpu.reference import apply_rotary, assert_within_reference_error, attention_ref
    from faforge.gpu.suite.harness import DEVICE, DTYPES, KVCACHE_FACTOR, randn

ROTARY_DIM = 64  # a multiple of 16, <= the head dim
CACHE_SEQLENS = (61, 190)  # ragged; room left for the appended keys
LEFTPAD = (13, 100)  # keys before these columns are not part of the sequence


def make_cache(call, dt):
    """(cache passed to flash-attn, block_table, cache_batch_idx, view of a passed cache as the logical
    (batch, seqlen_k, kv_heads, head_dim) cache the reference attends to)."""
    shape = (call.kv_heads, call.head_dim)
    if call.paged:
        blocks_per_seq = call.seqlen_k // cases.PAGE
        cache = randn(call.batch * blocks_per_seq, cases.PAGE, *shape, dtype=dt, grad=False)
        block_table = (
            torch.randperm(call.batch * blocks_per_seq, device=DEVICE).to(torch.int32).view(call.batch, blocks_per_seq)
        )
        return cache, block_table, None, lambda c: c[block_table.long()].reshape(call.batch, call.seqlen_k, *shape)
    if call.cache_batch_idx:  # a cache with room for more sequences than the batch; the batch picks some
        cache = randn(2 * call.batch, call.seqlen_k, *shape, dtype=dt, grad=False)
        batch_idx = torch.randperm(2 * call.batch, device=DEVICE)[: call.batch].to(torch.int32)
        return cache, None, batch_idx, lambda c: c[batch_idx.long()]
    return randn(call.batch, call.seqlen_k, *shape, dtype=dt, grad=False), None, None, lambda c: c


@pytest.mark.parametrize("case", list(cases.kvcache().values()), ids=list(cases.kvcache()))
def test_kvcache(case):
    call = case.call
    torch.manual_seed(0)
    dt = DTYPES[call.dtype]
    q = randn(call.batch, call.seqlen_q, call.heads, call.head_dim, dtype=dt, grad=False)
    k_cache, block_table, batch_idx, logical = make_cache(call, dt)
    v_cache = torch.randn_like(k_cache)
    k_new, v_new = (
        randn(call.batch, case.seqlen_new, call.kv_heads, call.head_dim, dtype=dt, grad=False) for _ in range(2)
    )
    cache_seqlens = torch.tensor(CACHE_SEQLENS, dtype=torch.int32, device=DEVICE)
    leftpad = torch.tensor(LEFTPAD, dtype=torch.int32, device=DEVICE) if case.leftpad else None
    cos = sin = None
    q_ref, k_new_ref = q, k_new
    if case.rotary:
        angle = torch.rand(call.seqlen_k, ROTARY_DIM // 2, device=DEVICE) * 2 * math.pi
        cos, sin = torch.cos(angle).to(dt), torch.sin(angle).to(dt)
        interleaved = case.rotary == "interleaved"
        if call.causal or call.window != (-1, -1):  # query i at cache_seqlens + i
            q_ref = apply_rotary(q, cos, sin, cache_seqlens, interleaved=interleaved)
        else:  # every query at cache_seqlens
            flat = q.reshape(call.batch, 1, call.seqlen_q * call.heads, call.head_dim)
            q_ref = apply_rotary(flat, cos, sin, cache_seqlens, interleaved=interleaved).view_as(q)
        k_new_ref = apply_rotary(k_new, cos, sin, cache_seqlens, interleaved=interleaved)
    k_ref, v_ref = logical(k_cache).clone(), logical(v_cache).clone()
    for b, start in enumerate(CACHE_SEQLENS):
        k_ref[b, start : start + case.seqlen_new] = k_new_ref[b]
        v_ref[b, start : start + case.seqlen_new] = v_new[b]
    alibi = torch.rand(call.batch, call.heads, device=DEVICE, dtype=torch.float32) * 0.3 if call.alibi else None

    out = flash_attn_with_kvcache(
        q, k_cache, v_cache,
        k=k_new if case.seqlen_new else None, v=v_new if case.seqlen_new else None,
        rotary_cos=cos, rotary_sin=sin, cache_seqlens=cache_seqlens, cache_batch_idx=batch_idx,
        cache_leftpad=leftpad, block_table=block_table, causal=call.causal, window_size=call.window,
        softcap=call.softcap, rotary_interleaved=case.rotary == "interleaved", alibi_slopes=alibi,
        num_splits=call.num_splits,
    )  # fmt: skip

    # The cache was updated in place: new keys rotated there like the reference's, values copied verbatim.
    eps = torch.finfo(dt).eps  # the kernel and the reference may round the rotated keys one ulp apart
    torch.testing.assert_close(logical(k_cache), k_ref, rtol=eps, atol=eps)
    assert torch.equal(logical(v_cache), v_ref)
    columns = torch.arange(call.seqlen_k, device=DEVICE)
    valid = columns < (cache_seqlens + case.seqlen_new).view(-1, 1)
    if leftpad is not None:
        valid &= columns >= leftpad.view(-1, 1)
    reference = dict(
        key_padding_mask=valid,
        key_leftpad=leftpad,
        causal=call.causal,
        window=call.window,
        softcap=call.softcap,
        alibi_slopes=alibi,
    )
    exact = attention_ref(q_ref, k_ref, v_ref, **reference)
    same_precision = attention_ref(q_ref, k_ref, v_ref, upcast=False, reorder_ops=True, **reference)
    assert_within_reference_error(f"kvcache {call}", out, exact, same_precision, factor=KVCACHE_FACTOR)
