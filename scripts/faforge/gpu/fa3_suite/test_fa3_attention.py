"""FA3's attention calls against the fp32 reference, each where the package's declaration says the
binary holds it (faforge.gpu.fa3_gate: build_flags, head dims, dtypes).

Upstream's rule (hopper/test_flash_attn.py L255-L256, L343-L348): the output's max error against the
fp32 answer is at most rtol (2; 3 with softcap) times PyTorch's own error in the input precision, plus
twice the fp32 answer's rounding at magnitude 0.3; the gradients likewise. The KV cache (L1048-L1049):
2x (4x for FP8) plus 1e-5.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from faforge.family import FLASH_ATTN_3
from faforge.gpu.fa3_gate import evaluate
from faforge.gpu.fa3_suite import gate_marks

pytestmark = gate_marks()
GATE = evaluate()
if GATE.usable:
    import torch
    from flash_attn_interface import (
        flash_attn_func,
        flash_attn_varlen_func,
        flash_attn_with_kvcache,
        get_scheduler_metadata,
    )

    from faforge.gpu.reference import assert_within_reference_error, attention_ref

    torch.set_float32_matmul_precision("highest")  # the reference must be fp32, not TF32 (faforge.gpu.suite.harness)
    DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}

DEVICE = "cuda"
SHAPES = {
    "ragged": (113, 203),
    "aligned": (256, 512),
    "long": (1023, 1024),
}  # (seqlen_q, seqlen_k), from upstream's list
CAUSAL = {"full": False, "causal": True}
BATCH, HEADS = 2, 6
KV_HEADS = {"mqa": 1, "gqa": 2}
VARLEN_LENGTHS = ([37, 129, 1, 200], [53, 64, 17, 211])  # one of length 1, one with more queries than keys


def needs(*features: str) -> pytest.MarkDecorator:
    """Skip unless the package declares every feature (a disabled one is not in the binary)."""
    missing = [f for f in features if not GATE.enabled(f)]
    return pytest.mark.skipif(
        bool(missing), reason=f"the package was built without {', '.join(missing)} ({FLASH_ATTN_3.config_module}.py)"
    )


def rounding_atol(exact: torch.Tensor) -> float:
    """Upstream's absolute slack: twice the fp32 answer's rounding error at magnitude 0.3."""
    return 2 * (exact + 0.3 - 0.3 - exact).abs().max().item()


def check(
    name: str,
    flash: torch.Tensor,
    exact: torch.Tensor,
    same_precision: torch.Tensor,
    *,
    rtol: float = 2,
    extra_atol: float = 0.0,
) -> None:
    assert_within_reference_error(
        name, flash, exact, same_precision, factor=rtol, atol=rounding_atol(exact) + extra_atol
    )


def inputs(
    dtype: torch.dtype, seqlen_q: int, seqlen_k: int, head_dim: int, kv_heads: int = HEADS, scale: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    q = (torch.randn(BATCH, seqlen_q, HEADS, head_dim, device=DEVICE, dtype=dtype) * scale).requires_grad_()
    k, v = (
        torch.randn(BATCH, seqlen_k, kv_heads, head_dim, device=DEVICE, dtype=dtype).requires_grad_() for _ in range(2)
    )
    return q, k, v


def forward_backward(
    name: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    rtol: float = 2,
    grad_atol: float = 0.0,
    **features: Any,
) -> None:
    """flash_attn_func vs the reference; the backward too where the package has it."""
    out = flash_attn_func(
        q, k, v, **{("window_size" if key == "window" else key): value for key, value in features.items()}
    )
    reference = {key: value for key, value in features.items() if key in ("causal", "window", "softcap")}
    exact = attention_ref(q, k, v, **reference)
    same_precision = attention_ref(q, k, v, upcast=False, reorder_ops=True, **reference)
    check(f"{name}: out", out, exact, same_precision, rtol=rtol)
    if not GATE.enabled("BACKWARD"):
        return
    grad_out = torch.randn_like(out)
    grads = [torch.autograd.grad(o, (q, k, v), grad_out) for o in (out, exact, same_precision)]
    for label, got, want, yardstick in zip(("dq", "dk", "dv"), *grads, strict=True):
        check(f"{name}: {label}", got, want, yardstick, rtol=rtol, extra_atol=grad_atol)


def cases(*axes: dict) -> list:
    return [
        pytest.param(*(axis[key] for axis, key in zip(axes, keys, strict=True)), id="-".join(keys))
        for keys in itertools.product(*axes)
    ]


DENSE = [
    pytest.param(dtype, dim, SHAPES[shape], causal, id=f"{dtype}-hdim{dim}-{shape}-{c}")
    for dtype in GATE.dtypes
    for dim in GATE.head_dims
    for shape in SHAPES
    for c, causal in CAUSAL.items()
]


@pytest.mark.parametrize("dtype, head_dim, shape, causal", DENSE)
def test_dense(dtype: str, head_dim: int, shape: tuple[int, int], causal: bool) -> None:
    """Every declared head dim and dtype, causal and not, on ragged and block-aligned lengths."""
    forward_backward(
        f"{dtype} hdim{head_dim} {shape} causal={causal}", *inputs(DTYPES[dtype], *shape, head_dim), causal=causal
    )


@pytest.mark.parametrize("kv_heads, causal", cases(KV_HEADS, CAUSAL))
def test_mqa_gqa(kv_heads, causal):
    """6 query heads sharing 1 or 2 k/v heads; PackGQA too where it is built."""
    dim = GATE.head_dims[0]
    q, k, v = inputs(DTYPES["bf16"], 217, 145, dim, kv_heads=kv_heads)
    forward_backward(f"{kv_heads} kv heads causal={causal}", q, k, v, causal=causal)
    if GATE.enabled("PACKGQA"):
        forward_backward(f"{kv_heads} kv heads pack_gqa causal={causal}", q, k, v, causal=causal, pack_gqa=True)


@needs("LOCAL")
@pytest.mark.parametrize("causal", CAUSAL.values(), ids=CAUSAL)
def test_local_window(causal):
    forward_backward(
        f"window (37, 21) causal={causal}",
        *inputs(DTYPES["bf16"], 137, 251, GATE.head_dims[0]),
        causal=causal,
        window=(37, 21),
    )


@needs("SOFTCAP")
def test_softcap():
    """Upstream scales q by softcap / 4 and allows rtol 3 and 3e-4 more on the gradients."""
    q, k, v = inputs(DTYPES["bf16"], 137, 251, GATE.head_dims[0], scale=0.5)
    forward_backward("softcap 2.0", q, k, v, softcap=2.0, rtol=3, grad_atol=3e-4)


@needs("SPLIT")
def test_split_kv():
    """num_splits=3: the split-KV forward and the combine kernel (forward only, as upstream)."""
    q, k, v = inputs(DTYPES["bf16"], 113, 1024, GATE.head_dims[0])
    out = flash_attn_func(q, k, v, num_splits=3)
    check("num_splits=3: out", out, attention_ref(q, k, v), attention_ref(q, k, v, upcast=False, reorder_ops=True))


@needs("VARLEN")
@pytest.mark.parametrize("causal", CAUSAL.values(), ids=CAUSAL)
def test_varlen(causal):
    """Four packed sequences of ragged lengths, forward and backward."""
    torch.manual_seed(0)
    q_lens, k_lens = VARLEN_LENGTHS
    dim, dtype = GATE.head_dims[0], DTYPES["bf16"]
    q = torch.randn(sum(q_lens), HEADS, dim, device=DEVICE, dtype=dtype).requires_grad_()
    k, v = (torch.randn(sum(k_lens), HEADS, dim, device=DEVICE, dtype=dtype).requires_grad_() for _ in range(2))
    cu_q, cu_k = ([0, *itertools.accumulate(lens)] for lens in (q_lens, k_lens))
    out = flash_attn_varlen_func(
        q,
        k,
        v,
        torch.tensor(cu_q, dtype=torch.int32, device=DEVICE),
        torch.tensor(cu_k, dtype=torch.int32, device=DEVICE),
        max(q_lens),
        max(k_lens),
        causal=causal,
    )

    def reference(**precision):
        return torch.cat(
            [
                attention_ref(q[qa:qb][None], k[ka:kb][None], v[ka:kb][None], causal=causal, **precision)[0]
                for qa, qb, ka, kb in zip(cu_q, cu_q[1:], cu_k, cu_k[1:], strict=False)
            ]
        )

    exact, same_precision = reference(), reference(upcast=False, reorder_ops=True)
    check(f"varlen causal={causal}: out", out, exact, same_precision)
    if GATE.enabled("BACKWARD"):
        grad_out = torch.randn_like(out)
        grads = [torch.autograd.grad(o, (q, k, v), grad_out) for o in (out, exact, same_precision)]
        for label, got, want, yardstick in zip(("dq", "dk", "dv"), *grads, strict=True):
            check(f"varlen causal={causal}: {label}", got, want, yardstick)


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


@needs("FP8")
@pytest.mark.parametrize("causal", CAUSAL.values(), ids=CAUSAL)
def test_fp8_forward(causal):
    """e4m3 inputs, bf16 output, forward only; the yardstick rounds P to fp8 as the kernel does."""
    if GATE.capability is None or GATE.capability[0] != 9:
        pytest.skip("FA3's FP8 forward runs on sm_90 only")
    torch.manual_seed(0)
    dim = GATE.head_dims[-1]
    q_ref, k_ref, v_ref = (
        torch.randn(BATCH, n, h, dim, device=DEVICE, dtype=torch.bfloat16).to(torch.float8_e4m3fn).to(torch.bfloat16)
        for n, h in ((256, HEADS), (512, HEADS), (512, HEADS))
    )
    out = flash_attn_func(*(t.to(torch.float8_e4m3fn) for t in (q_ref, k_ref, v_ref)), causal=causal)
    exact = attention_ref(q_ref, k_ref, v_ref, causal=causal)
    same_precision = attention_ref(
        q_ref, k_ref, v_ref, causal=causal, upcast=False, reorder_ops=True, intermediate_dtype=torch.float8_e4m3fn
    )
    check(f"fp8 causal={causal}: out", out, exact, same_precision)


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
