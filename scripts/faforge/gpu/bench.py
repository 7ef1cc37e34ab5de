"""Forward and backward TFLOP/s of flash-attn and of PyTorch's SDPA (flash and efficient backends), same shapes.

The shapes follow upstream's benchmarks/benchmark_flash_attention.py: hidden size
2048 split into heads of 64 or 128, batch x seqlen kept at 16k tokens for
seqlen 512 .. 16k, causal and not. FLOPs count the two matmuls of the forward
(4 * batch * seqlen^2 * heads * head_dim, halved when causal) and 2.5x that for
the backward, as upstream does. Each number is the mean of `repeats` timed
calls, back to back between two CUDA events, after at least 100 ms of untimed warm-up calls (clocks up).

torch and flash_attn are imported inside `run_benchmark` only, so the faforge
CLI starts without them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from faforge.family import FLASH_ATTN

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
TOTAL_TOKENS = 16384
HIDDEN = 2048
IMPLEMENTATIONS = (FLASH_ATTN.package, "sdpa-flash", "sdpa-efficient")
BACKWARD_FLOPS_FACTOR = 2.5  # upstream's count: backward = 2.5 x forward matmul FLOPs


@dataclass(frozen=True)
class Shape:
    batch: int
    seqlen: int
    heads: int
    head_dim: int
    causal: bool

    def flops(self, direction: str) -> float:
        forward = 4 * self.batch * self.seqlen**2 * self.heads * self.head_dim / (2 if self.causal else 1)
        return forward if direction == "fwd" else BACKWARD_FLOPS_FACTOR * forward


def shapes(seqlens=SEQLENS, head_dims=HEAD_DIMS) -> list[Shape]:
    return [
        Shape(TOTAL_TOKENS // seqlen, seqlen, HIDDEN // head_dim, head_dim, causal)
        for head_dim in head_dims
        for causal in (False, True)
        for seqlen in seqlens
    ]


WARMUP_S = 0.1  # at least this long of untimed calls first, so the GPU's clocks are up


def mean_ms(call: Callable[[], object], *, calls: int, warmup_s: float = WARMUP_S, before: Callable[[], None] = lambda: None) -> float:
    """Milliseconds per call: `calls` back-to-back calls between two CUDA events, after >= warmup_s of warm-up.

    One pair of events around the whole batch measures the GPU's time, not the launch gaps a per-call
    synchronize would add; `before` (e.g. clearing gradients) must be host-only work."""
    import torch  # noqa: PLC0415

    deadline = time.perf_counter() + warmup_s
    while True:
        before()
        call()
        torch.cuda.synchronize()
        if time.perf_counter() >= deadline:
            break
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        before()
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _attention_calls(shape: Shape, dtype):
    """{implementation: (forward function of nothing, leaf tensors)} for one shape."""
    import torch  # noqa: PLC0415
    from flash_attn import flash_attn_func  # noqa: PLC0415
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415
    from torch.nn.functional import scaled_dot_product_attention  # noqa: PLC0415

    def leaves(layout):
        return [torch.randn(*layout, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3)]

    flash = leaves((shape.batch, shape.seqlen, shape.heads, shape.head_dim))
    sdpa = leaves((shape.batch, shape.heads, shape.seqlen, shape.head_dim))

    def sdpa_with(backend):
        def call():
            with sdpa_kernel(backend):
                return scaled_dot_product_attention(*sdpa, is_causal=shape.causal)

        return call

    return {
        FLASH_ATTN.package: (lambda: flash_attn_func(*flash, causal=shape.causal), flash),
        "sdpa-flash": (sdpa_with(SDPBackend.FLASH_ATTENTION), sdpa),
        "sdpa-efficient": (sdpa_with(SDPBackend.EFFICIENT_ATTENTION), sdpa),
    }


def measure(shape: Shape, dtype, *, repeats: int) -> list[dict]:
    """Two records (fwd, bwd) for one shape: TFLOP/s per implementation, or the error that stopped it."""
    import torch  # noqa: PLC0415

    records = {d: {"tflops": {}, "errors": {}} for d in ("fwd", "bwd")}
    for name, (forward, leaves) in _attention_calls(shape, dtype).items():
        try:
            ms = mean_ms(forward, calls=repeats)
            records["fwd"]["tflops"][name] = shape.flops("fwd") / ms / 1e9
            out = forward()
            grad = torch.randn_like(out)

            def clear_grads(leaves=leaves):
                for leaf in leaves:
                    leaf.grad = None

            ms = mean_ms(lambda: out.backward(grad, retain_graph=True), calls=repeats, before=clear_grads)
            records["bwd"]["tflops"][name] = shape.flops("bwd") / ms / 1e9
        except RuntimeError as exc:  # e.g. "No available kernel" from an SDPA backend that cannot take this shape
            for record in records.values():
                if name not in record["tflops"]:
                    record["tflops"][name] = None
                    record["errors"][name] = str(exc).strip().splitlines()[0]
        finally:
            torch.cuda.empty_cache()
    return [
        {
            "batch": shape.batch,
            "seqlen": shape.seqlen,
            "heads": shape.heads,
            "head_dim": shape.head_dim,
            "causal": shape.causal,
            "direction": direction,
            "tflops": record["tflops"],
            "ratios": ratios(record["tflops"]),
            "errors": record["errors"],
        }
        for direction, record in records.items()
    ]


def ratios(tflops: dict) -> dict:
    """flash-attn's speed over each SDPA backend's (None where either did not run)."""
    ours = tflops.get(FLASH_ATTN.package)
    return {
        f"{FLASH_ATTN.package}/{other}": (ours / tflops[other] if ours and tflops.get(other) else None)
        for other in IMPLEMENTATIONS[1:]
    }


def run_benchmark(
    *, dtype_name: str = "bf16", seqlens=SEQLENS, head_dims=HEAD_DIMS, repeats: int = 10, progress=lambda shape: None
) -> list[dict]:
    import torch  # noqa: PLC0415

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(0)
    results = []
    for shape in shapes(seqlens, head_dims):
        progress(shape)
        results += measure(shape, dtype, repeats=repeats)
    return results
