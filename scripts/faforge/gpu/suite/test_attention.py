"""flash_attn_func and flash_attn_varlen_func, forward and backward, against the fp32 reference."""

from __future__ import annotations

import itertools

import pytest

from faforge.gpu.gate import evaluate
from faforge.gpu.suite import DTYPE_NAMES, gate_marks

pytestmark = gate_marks()
if evaluate().usable:
    import torch
    from flash_attn import flash_attn_func, flash_attn_varlen_func

    from faforge.gpu.reference import attention_ref
    from faforge.gpu.suite.harness import DEVICE, DTYPES, check_forward_backward, randn

CAUSAL = pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
DTYPE = pytest.mark.parametrize("dtype", DTYPE_NAMES)


def run_dense(
    dtype: str, *, seqlen_q: int, seqlen_k: int, dim: int, heads: int = 4, kv_heads: int = 4, batch: int = 2, **features
) -> None:
    """One flash_attn_func call vs the reference; `features` uses attention_ref's names."""
    torch.manual_seed(0)
    q = randn(batch, seqlen_q, heads, dim, dtype=DTYPES[dtype])
    k, v = (randn(batch, seqlen_k, kv_heads, dim, dtype=DTYPES[dtype]) for _ in range(2))
    flash_kwargs = {("window_size" if key == "window" else key): value for key, value in features.items()}
    out = flash_attn_func(q, k, v, dropout_p=0.0, **flash_kwargs)
    exact = attention_ref(q, k, v, **features)
    same_precision = attention_ref(q, k, v, upcast=False, reorder_ops=True, **features)
    check_forward_backward(f"{dtype} hdim{dim} {features}", (q, k, v), out, exact, same_precision)


@CAUSAL
@pytest.mark.parametrize("head_dim", evaluate().head_dims, ids=lambda d: f"hdim{d}")
@DTYPE
def test_dense(dtype, head_dim, causal):
    """Every compiled head dim; 113 x 203 is no multiple of any kernel's block size."""
    run_dense(dtype, seqlen_q=113, seqlen_k=203, dim=head_dim, causal=causal)


@CAUSAL
@pytest.mark.parametrize("kv_heads", [1, 2], ids=["mqa", "gqa"])
@DTYPE
def test_mqa_gqa(dtype, kv_heads, causal):
    """6 query heads sharing 1 or 2 k/v heads; seqlen_q > seqlen_k leaves causal rows that see no key."""
    run_dense(dtype, seqlen_q=217, seqlen_k=145, dim=128, heads=6, kv_heads=kv_heads, causal=causal)


@CAUSAL
@pytest.mark.parametrize("feature", ["sliding-window", "softcap", "alibi"])
@DTYPE
def test_masks_and_biases(dtype, feature, causal):
    features = {
        "sliding-window": lambda: {"window": (37, 0 if causal else 21)},
        "softcap": lambda: {"softcap": 2.0},  # small enough that tanh changes the scores of randn inputs
        "alibi": lambda: {"alibi_slopes": torch.rand(2, 4, device=DEVICE, dtype=torch.float32) * 0.3},
    }[feature]()
    run_dense(dtype, seqlen_q=137, seqlen_k=251, dim=96, causal=causal, **features)


@CAUSAL
@pytest.mark.parametrize("kv_heads", [4, 2], ids=["mha", "gqa"])
@DTYPE
def test_varlen(dtype, kv_heads, causal):
    """Four packed sequences of ragged lengths (one of length 1, one with more queries than keys)."""
    torch.manual_seed(0)
    q_lens, k_lens = [37, 129, 1, 200], [53, 64, 17, 211]
    q = randn(sum(q_lens), 4, 64, dtype=DTYPES[dtype])
    k, v = (randn(sum(k_lens), kv_heads, 64, dtype=DTYPES[dtype]) for _ in range(2))
    cu_q, cu_k = ([0, *itertools.accumulate(lens)] for lens in (q_lens, k_lens))
    out = flash_attn_varlen_func(
        q, k, v,
        torch.tensor(cu_q, dtype=torch.int32, device=DEVICE),
        torch.tensor(cu_k, dtype=torch.int32, device=DEVICE),
        max(q_lens), max(k_lens), dropout_p=0.0, causal=causal,
    )  # fmt: skip

    def reference(**precision):
        pieces = [
            attention_ref(q[qa:qb][None], k[ka:kb][None], v[ka:kb][None], causal=causal, **precision)[0]
            for qa, qb, ka, kb in zip(cu_q, cu_q[1:], cu_k, cu_k[1:])
        ]
        return torch.cat(pieces)

    check_forward_backward(f"varlen {dtype}", (q, k, v), out, reference(), reference(upcast=False, reorder_ops=True))
