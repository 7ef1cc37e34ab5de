"""flash_attn.cute.flash_attn_func against PyTorch's SDPA in fp32, forward and backward (upstream's rule: the error
against that answer at most 2x, gradients 3x, PyTorch's own error in the input precision). The first call of
each kernel is the DSL's compile: timed apart (the gate's first_calls), never mixed into the numerics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from faforge.families.flash_attn_4.gpu_gate import HEAD_DIMS, evaluate
from faforge.families.flash_attn_4.gpu_suite import gate_marks
from faforge.family import FLASH_ATTN_4

pytestmark = gate_marks()
GATE = evaluate()
if GATE.usable:
    import torch
    from flash_attn.cute import flash_attn_func
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    from faforge.gpu.reference import assert_within_reference_error, attention_ref
    from faforge.gpu.suite.harness import BWD_FACTOR, DEVICE, DTYPES, FWD_FACTOR

BATCH, HEADS = 2, 4
# Square only: SDPA's causal mask is top-left aligned, flash-attn's bottom-right; they agree when seqlen_q ==
# seqlen_k. 1000 is no multiple of any tile; 256 is.
SEQLENS = {"aligned": 256, "ragged": 1000}


def sdpa_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool) -> torch.Tensor:
    """The answer: SDPA's math backend in fp32 on (batch, seqlen, heads, dim) tensors, rounded to q's dtype."""
    with sdpa_kernel(SDPBackend.MATH):
        out = scaled_dot_product_attention(*(t.float().transpose(1, 2) for t in (q, k, v)), is_causal=causal)
    return out.transpose(1, 2).to(q.dtype)


def first_call(label: str, call: Callable[[], Any]) -> Any:
    """Run `call` once, synchronized; its seconds go to the gate's first_calls when it is this kernel's first."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    result = call()
    torch.cuda.synchronize()
    GATE.first_calls.setdefault(label, round(time.perf_counter() - started, 3))
    return result


CASES = [
    pytest.param(dtype, dim, seqlen, causal, id=f"{dtype}-hdim{dim}-{shape}-{'causal' if causal else 'full'}")
    for dtype in ("bf16", "fp16")
    for dim in HEAD_DIMS
    for shape, seqlen in SEQLENS.items()
    for causal in (False, True)
]


@pytest.mark.parametrize("dtype, head_dim, seqlen, causal", CASES)
def test_forward_backward_against_sdpa(dtype: str, head_dim: int, seqlen: int, causal: bool) -> None:
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(BATCH, seqlen, HEADS, head_dim, device=DEVICE, dtype=DTYPES[dtype]).requires_grad_()
        for _ in range(3)
    )
    kernel = f"{dtype} hdim{head_dim} causal={causal}"
    out = first_call(f"fwd {kernel}", lambda: flash_attn_func(q, k, v, causal=causal))
    out = out[0] if isinstance(out, tuple) else out  # (out, lse) in some releases
    exact = sdpa_fp32(q, k, v, causal=causal)
    # the yardstick: the same math in the input precision (SDPA's math backend upcasts half inputs itself)
    same_precision = attention_ref(q, k, v, causal=causal, upcast=False, reorder_ops=True)
    name = f"{kernel} seqlen {seqlen}"
    assert_within_reference_error(f"{name}: out", out, exact, same_precision, factor=FWD_FACTOR)
    grad_out = torch.randn_like(out)
    flash_grads = first_call(f"bwd {kernel}", lambda: torch.autograd.grad(out, (q, k, v), grad_out))
    grads = [flash_grads, *(torch.autograd.grad(o, (q, k, v), grad_out) for o in (exact, same_precision))]
    for label, got, want, yardstick in zip(("dq", "dk", "dv"), *grads, strict=True):
        assert_within_reference_error(f"{name}: {label}", got, want, yardstick, factor=BWD_FACTOR)


def test_version_comes_from_metadata() -> None:
    """The gate reads the distribution's version; the module's own __version__ is 0.0.0 in every release."""
    assert GATE.versions[FLASH_ATTN_4.package], GATE.versions
