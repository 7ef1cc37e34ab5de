"""What every numerics test in the suite does: random inputs, and upstream's error rule for out, dq, dk, dv."""

from __future__ import annotations

import torch

from faforge.gpu.reference import assert_within_reference_error

DEVICE = "cuda"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# Factors from upstream flash-attn 2.8.3 tests/test_flash_attn.py: the output may be off by at most 2x
# PyTorch's same-precision error, the gradients (test_flash_attn_output, test_flash_attn_varlen_output)
# by 3x, and the KV-cache output (test_flash_attn_kvcache, `mult`) by 3x.
FWD_FACTOR = 2
BWD_FACTOR = 3
KVCACHE_FACTOR = 3

# The fp32 reference must be fp32: with TF32 (10-bit mantissa) matmuls, which a machine may enable by default
# (torch.set_float32_matmul_precision, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE), the "exact" answer would be as coarse
# as the fp16 run it judges. test_attention.py::test_reference_runs_in_full_fp32 checks it took effect.
torch.set_float32_matmul_precision("highest")
torch.backends.cudnn.allow_tf32 = False


def randn(*shape: int, dtype: torch.dtype, grad: bool = True) -> torch.Tensor:
    return torch.randn(*shape, device=DEVICE, dtype=dtype).requires_grad_(grad)


def check_forward_backward(
    name: str, leaves: tuple[torch.Tensor, ...], flash: torch.Tensor, exact: torch.Tensor, same_precision: torch.Tensor
) -> None:
    """Hold flash-attn's output and its gradients w.r.t. `leaves` (q, k, v) to upstream's rule."""
    assert_within_reference_error(f"{name}: out", flash, exact, same_precision, factor=FWD_FACTOR)
    grad_out = torch.randn_like(flash)
    grads = [torch.autograd.grad(out, leaves, grad_out) for out in (flash, exact, same_precision)]
    for label, got, want, yardstick in zip(("dq", "dk", "dv"), *grads, strict=True):
        assert_within_reference_error(f"{name}: {label}", got, want, yardstick, factor=BWD_FACTOR)
