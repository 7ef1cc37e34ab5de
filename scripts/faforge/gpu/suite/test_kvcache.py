"""flash_attn_with_kvcache: appending to a cache in place, rotary embeddings, decoding with GQA."""

from __future__ import annotations

import math

import pytest

from faforge.gpu.gate import evaluate
from faforge.gpu.suite import DTYPE_NAMES, gate_marks

pytestmark = gate_marks()
if evaluate().usable:
    import torch
    from flash_attn import flash_attn_with_kvcache

    from faforge.gpu.reference import apply_rotary, assert_within_reference_error, attention_ref
    from faforge.gpu.suite.harness import DEVICE, DTYPES, KVCACHE_FACTOR, randn

CAPACITY, HEADS, KV_HEADS, DIM, ROTARY_DIM = 257, 6, 2, 128, 64  # rotary_dim: a multiple of 16, <= DIM
# name: (query and appended length, causal, rotary: None / "half" (GPT-NeoX) / "interleaved" (GPT-J))
VARIANTS = {
    "append": (37, False, None),
    "append-causal": (37, True, None),
    "rotary": (37, True, "half"),
    "rotary-interleaved": (37, True, "interleaved"),
    "decode": (1, True, None),  # one query, no new keys: the decode path that packs GQA heads
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_kvcache(dtype, variant):
    seqlen_q, causal, rotary = VARIANTS[variant]
    appended = 0 if variant == "decode" else seqlen_q
    torch.manual_seed(0)
    dt = DTYPES[dtype]
    q = randn(2, seqlen_q, HEADS, DIM, dtype=dt, grad=False)
    k_cache, v_cache = (randn(2, CAPACITY, KV_HEADS, DIM, dtype=dt, grad=False) for _ in range(2))
    k_new, v_new = (randn(2, appended, KV_HEADS, DIM, dtype=dt, grad=False) for _ in range(2))
    cache_seqlens = torch.tensor([61, 190], dtype=torch.int32, device=DEVICE)  # ragged; room left for `appended`
    cos = sin = None
    q_ref, k_new_ref = q, k_new
    if rotary:
        angle = torch.rand(CAPACITY, ROTARY_DIM // 2, device=DEVICE) * 2 * math.pi
        cos, sin = torch.cos(angle).to(dt), torch.sin(angle).to(dt)
        interleaved = rotary == "interleaved"
        q_ref = apply_rotary(q, cos, sin, cache_seqlens, interleaved=interleaved)  # causal: query i at seqlen + i
        k_new_ref = apply_rotary(k_new, cos, sin, cache_seqlens, interleaved=interleaved)
    k_cache_ref, v_cache_ref = k_cache.clone(), v_cache.clone()
    for b, start in enumerate(cache_seqlens.tolist()):
        k_cache_ref[b, start : start + appended] = k_new_ref[b]
        v_cache_ref[b, start : start + appended] = v_new[b]

    out = flash_attn_with_kvcache(
        q, k_cache, v_cache,
        k=k_new if appended else None, v=v_new if appended else None,
        rotary_cos=cos, rotary_sin=sin, cache_seqlens=cache_seqlens,
        causal=causal, rotary_interleaved=rotary == "interleaved",
    )  # fmt: skip

    # The cache was updated in place: new keys rotated there like the reference's, values copied verbatim.
    eps = torch.finfo(dt).eps  # the kernel and the reference may round the rotated keys one ulp apart
    torch.testing.assert_close(k_cache, k_cache_ref, rtol=eps, atol=eps)
    assert torch.equal(v_cache, v_cache_ref)
    valid = torch.arange(CAPACITY, device=DEVICE) < (cache_seqlens + appended).view(-1, 1)
    reference = dict(key_padding_mask=valid, causal=causal)
    exact = attention_ref(q_ref, k_cache_ref, v_cache_ref, **reference)
    same_precision = attention_ref(q_ref, k_cache_ref, v_cache_ref, upcast=False, reorder_ops=True, **reference)
    assert_within_reference_error(f"kvcache {variant} {dtype}", out, exact, same_precision, factor=KVCACHE_FACTOR)
