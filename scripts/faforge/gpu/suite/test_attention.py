"""flash_attn_func and flash_attn_varlen_func, forward and backward, against the fp32 reference.

The cases come from faforge.gpu.suite.cases, where each is a dispatch Call: the kernel TU every test
reaches is computed there (see tests/gpu/test_kernel_coverage.py).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pytest

from faforge.gpu.gate import evaluate
from faforge.gpu.suite import cases, gate_marks

pytestmark = gate_marks()
if evaluate().usable:
    import torch
    from flash_attn import flash_attn_func, flash_attn_varlen_func

    from faforge.gpu.reference import attention_ref
    from faforge.gpu.suite.harness import DEVICE, DTYPES, check_forward_backward, randn
if TYPE_CHECKING:
    from faforge.gpu.dispatch import Call


def parametrize(table: dict) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("call", list(table.values()), ids=list(table))


def dense_inputs(call):
    torch.manual_seed(0)
    dtype = DTYPES[call.dtype]
    q = randn(call.batch, call.seqlen_q, call.heads, call.head_dim, dtype=dtype)
    k, v = (randn(call.batch, call.seqlen_k, call.kv_heads, call.head_dim, dtype=dtype) for _ in range(2))
    features = {"causal": call.causal, "window": call.window, "softcap": call.softcap}
    if call.alibi:
        features["alibi_slopes"] = torch.rand(call.batch, call.heads, device=DEVICE, dtype=torch.float32) * 0.3
    return (q, k, v), features


def flash_kwargs(features: dict) -> dict:
    return {("window_size" if key == "window" else key): value for key, value in features.items()}


def run_dense(call: Call) -> None:
    """One flash_attn_func call vs the reference, forward and backward."""
    (q, k, v), features = dense_inputs(call)
    out = flash_attn_func(q, k, v, dropout_p=0.0, **flash_kwargs(features))
    exact = attention_ref(q, k, v, **features)
    same_precision = attention_ref(q, k, v, upcast=False, reorder_ops=True, **features)
    check_forward_backward(f"{call}", (q, k, v), out, exact, same_precision)


def test_reference_runs_in_full_fp32():
    """TF32 pinned off: an fp32 matmul is within fp32 rounding of float64 (TF32 is off by about 1e-3)."""
    torch.manual_seed(0)
    a, b = (torch.randn(1024, 1024, device=DEVICE) for _ in range(2))
    error = ((a @ b).double() - a.double() @ b.double()).abs().max().item() / (
        a.double() @ b.double()
    ).abs().max().item()
    assert error < 1e-5, f"fp32 matmul relative error {error:.2g}: TF32 is on, the reference is not fp32"


@parametrize(cases.dense(evaluate().head_dims))
def test_dense(call):
    """Every declared head dim, on ragged lengths (no multiple of any block size) and block-aligned ones."""
    run_dense(call)


@parametrize(cases.in_between())
def test_in_between_head_dims(call):
    """Head dims that are no kernel dim: padded, then run by the next kernel dim's TU with Is_even_K false."""
    run_dense(call)


@parametrize(cases.mqa_gqa())
def test_mqa_gqa(call):
    run_dense(call)


@parametrize(cases.masks_and_biases())
def test_masks_and_biases(call):
    run_dense(call)


@parametrize(cases.deterministic())
def test_deterministic(call):
    """deterministic=True: within the reference error, and a second backward gives the same bits."""
    (q, k, v), features = dense_inputs(call)
    out = flash_attn_func(q, k, v, deterministic=True, **flash_kwargs(features))
    exact = attention_ref(q, k, v, **features)
    same_precision = attention_ref(q, k, v, upcast=False, reorder_ops=True, **features)
    check_forward_backward(f"deterministic {call}", (q, k, v), out, exact, same_precision)
    # check_forward_backward's backward freed `out`'s graph (seen on the first H200 run): a fresh forward.
    out = flash_attn_func(q, k, v, deterministic=True, **flash_kwargs(features))
    grad_out = torch.randn_like(out)
    first, second = (torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True) for _ in range(2))
    for label, a, b in zip(("dq", "dk", "dv"), first, second, strict=True):
        assert torch.equal(a, b), f"deterministic=True: {label} differs between two identical backward calls"


@parametrize(cases.varlen())
def test_varlen(call):
    """Four packed sequences of ragged lengths (one of length 1, one with more queries than keys)."""
    torch.manual_seed(0)
    q_lens, k_lens = cases.VARLEN_LENGTHS
    dtype = DTYPES[call.dtype]
    q = randn(sum(q_lens), call.heads, call.head_dim, dtype=dtype)
    k, v = (randn(sum(k_lens), call.kv_heads, call.head_dim, dtype=dtype) for _ in range(2))
    cu_q, cu_k = ([0, *itertools.accumulate(lens)] for lens in (q_lens, k_lens))
    out = flash_attn_varlen_func(
        q, k, v,
        torch.tensor(cu_q, dtype=torch.int32, device=DEVICE),
        torch.tensor(cu_k, dtype=torch.int32, device=DEVICE),
        max(q_lens), max(k_lens), dropout_p=0.0, causal=call.causal,
    )  # fmt: skip

    def reference(**precision):
        pieces = [
            attention_ref(q[qa:qb][None], k[ka:kb][None], v[ka:kb][None], causal=call.causal, **precision)[0]
            for qa, qb, ka, kb in zip(cu_q, cu_q[1:], cu_k, cu_k[1:], strict=False)
        ]
        return torch.cat(pieces)

    check_forward_backward(f"varlen {call}", (q, k, v), out, reference(), reference(upcast=False, reorder_ops=True))
