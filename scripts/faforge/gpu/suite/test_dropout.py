"""Dropout: p > 0 checked statistically and numerically through the mask flash-attn returns; p = 0 exactly."""

from __future__ import annotations

import pytest

from faforge.gpu.gate import evaluate
from faforge.gpu.suite import DTYPE_NAMES, gate_marks

pytestmark = gate_marks()
if evaluate().usable:
    import torch
    from flash_attn import flash_attn_func

    from faforge.gpu.reference import assert_within_reference_error, attention_ref, key_offsets, outside_window
    from faforge.gpu.suite.harness import DTYPES, FWD_FACTOR, check_forward_backward, randn

P = 0.17
# 2 x 4 x 113 x 203 kept-or-dropped draws: the dropped fraction's standard deviation is below 0.001,
# so upstream's 0.01 tolerance is more than 10 sigma.
FRACTION_TOLERANCE = 0.01


def inputs(dtype: str, head_dim: int):
    torch.manual_seed(0)
    return tuple(randn(2, seqlen, 4, head_dim, dtype=DTYPES[dtype]) for seqlen in (113, 203, 203))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128], ids=lambda d: f"hdim{d}")
@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_dropout(dtype, head_dim, causal):
    q, k, v = inputs(dtype, head_dim)
    out, _, probs = flash_attn_func(q, k, v, dropout_p=P, causal=causal, return_attn_probs=True)
    # flash-attn marks a dropped probability by setting its sign bit (probs is padded to 128 x 128 blocks).
    keep = ~probs[:, :, : q.shape[1], : k.shape[1]].signbit()
    visible = ~outside_window(key_offsets(q.shape[1], k.shape[1], None, q.device), (-1, 0) if causal else (-1, -1))
    dropped = (~keep & visible).sum().item() / (visible.sum().item() * q.shape[0] * q.shape[2])
    assert abs(dropped - P) <= FRACTION_TOLERANCE, f"dropped fraction {dropped:.4f}, expected {P} +- {FRACTION_TOLERANCE}"

    # The backward pass regenerates the same mask from the saved RNG state, so the masked reference
    # must match out and dq, dk, dv.
    exact = attention_ref(q, k, v, causal=causal, dropout_p=P, dropout_keep=keep)
    same_precision = attention_ref(q, k, v, causal=causal, dropout_p=P, dropout_keep=keep, upcast=False, reorder_ops=True)
    check_forward_backward(f"dropout {dtype} hdim{head_dim}", (q, k, v), out, exact, same_precision)
    assert not torch.equal(out, flash_attn_func(q, k, v, dropout_p=P, causal=causal)), "a second call reused the mask"


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
def test_dropout_zero(dtype):
    """p = 0 drops nothing: repeated calls agree bit for bit and match the reference without dropout."""
    q, k, v = inputs(dtype, 64)
    out = flash_attn_func(q, k, v, dropout_p=0.0)
    assert torch.equal(out, flash_attn_func(q, k, v, dropout_p=0.0))
    exact, same_precision = attention_ref(q, k, v), attention_ref(q, k, v, upcast=False, reorder_ops=True)
    assert_within_reference_error(f"p=0 {dtype}", out, exact, same_precision, factor=FWD_FACTOR)
