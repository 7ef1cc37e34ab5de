"""What every FA3 numerics test does: random inputs, and upstream's error rule for out, dq, dk, dv.

Upstream's rule (hopper/test_flash_attn.py L255-L256, L343-L348): the output's max error against the
fp32 answer is at most rtol (2; 3 with softcap) times PyTorch's own error in the input precision, plus
twice the fp32 answer's rounding at magnitude 0.3; the gradients likewise. Imported only where the gate
finds the package usable (torch and flash_attn_interface are there).
"""

from __future__ import annotations

from typing import Any

import torch
from flash_attn_interface import flash_attn_func

from faforge.families.flash_attn_3.gpu_gate import evaluate
from faforge.gpu.reference import assert_within_reference_error, attention_ref

torch.set_float32_matmul_precision("highest")  # the reference must be fp32, not TF32 (faforge.gpu.suite.harness)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
DEVICE = "cuda"
BATCH, HEADS = 2, 6


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
    if not evaluate().enabled("BACKWARD"):
        return
    grad_out = torch.randn_like(out)
    grads = [torch.autograd.grad(o, (q, k, v), grad_out) for o in (out, exact, same_precision)]
    for label, got, want, yardstick in zip(("dq", "dk", "dv"), *grads, strict=True):
        check(f"{name}: {label}", got, want, yardstick, rtol=rtol, extra_atol=grad_atol)
