"""Forward and backward TFLOP/s of each flash-attn family's attention function (faforge.gpu.stage.GpuFamily) and
PyTorch's SDPA (flash, efficient and cuDNN backends), same shapes, as ratios and as a fraction of the GPU's
dense peak.

The shapes follow upstream's benchmarks/benchmark_flash_attention.py: hidden size
2048 split into heads of 64 or 128, batch x seqlen kept at 16k tokens for
seqlen 512 .. 16k, causal and not. FLOPs count the two matmuls of the forward
(4 * batch * seqlen^2 * heads * head_dim, halved when causal) and 2.5x that for
the backward, as upstream does. Each number is the mean of `repeats` timed
calls, back to back between two CUDA events, after at least 100 ms of untimed warm-up calls (clocks up).

torch and flash_attn are imported inside `run_benchmark` only, so the faforge
CLI starts without them. An implementation that is not installed, or that cannot take a shape (an SDPA
backend; a family's package built without that head dim), is n/a with its reason, not a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    import torch

    from faforge.gpu.stage import GpuFamily

SEQLENS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128)
TOTAL_TOKENS = 16384
HIDDEN = 2048
SDPA = ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
# Dense (no 2:4 sparsity) fp16/bf16 tensor-core peak in TFLOP/s, by a part of torch's device name; first match wins.
# H100 SXM5 and H200 (same GH100 compute): 989.4 (NVIDIA's figures as tabulated at
# https://glennklockwood.com/garden/processors/h100, "BF16 | 133.8 | 989.4 | 1978.9"); H100 PCIe: 756
# (datasheet: 1,513 with sparsity); A100: 312 (A100 datasheet, BF16 tensor core, dense).
DENSE_PEAK_TFLOPS = (("H200", 989.4), ("GH200", 989.4), ("H100 PCIe", 756.0), ("H100", 989.4), ("A100", 312.0))
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


def shapes(seqlens: Sequence[int] = SEQLENS, head_dims: Sequence[int] = HEAD_DIMS) -> list[Shape]:
    return [
        Shape(TOTAL_TOKENS // seqlen, seqlen, HIDDEN // head_dim, head_dim, causal)
        for head_dim in head_dims
        for causal in (False, True)
        for seqlen in seqlens
    ]


WARMUP_S = 0.1  # at least this long of untimed calls first, so the GPU's clocks are up


def mean_ms(
    call: Callable[[], object], *, calls: int, warmup_s: float = WARMUP_S, before: Callable[[], None] = lambda: None
) -> float:
    """Milliseconds per call: `calls` back-to-back calls between two CUDA events, after >= warmup_s of warm-up.

    One pair of events around the whole batch measures the GPU's time, not the launch gaps a per-call
    synchronize would add; `before` (e.g. clearing gradients) must be host-only work."""
    import torch  # noqa: PLC0415 (torch only when run)

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


def dense_peak(device: str | None) -> float | None:
    """The GPU's dense fp16/bf16 peak (TFLOP/s), None for a GPU not in DENSE_PEAK_TFLOPS."""
    return next((peak for part, peak in DENSE_PEAK_TFLOPS if device and part in device), None)


def implementations(families: Sequence[GpuFamily]) -> tuple[str, ...]:
    """The benchmark's columns: each family's package, in the families' order, then SDPA's backends."""
    return (*(family.package for family in families), *SDPA)


def ratio_pairs(families: Sequence[GpuFamily]) -> tuple[tuple[str, str], ...]:
    """(faster?, than) pairs reported as ratios: the newest family first, each against its baselines."""
    return tuple((family.package, baseline) for family in reversed(families) for baseline in family.bench_baselines)


def installed(families: Sequence[GpuFamily]) -> dict[str, Callable[..., Any] | str]:
    """{package: its attention function, or the reason it is not here} for each family."""
    return {family.package: family.attention_function() for family in families}


def _attention_calls(
    shape: Shape, dtype: torch.dtype, flash_functions: dict[str, Callable[..., Any] | str]
) -> dict[str, tuple[Callable[[], torch.Tensor], list[torch.Tensor]] | str]:
    """{implementation: (forward function of nothing, leaf tensors) or the reason it cannot run} for one shape."""
    import torch  # noqa: PLC0415 (torch only when run)
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415 (torch only when run)
    from torch.nn.functional import scaled_dot_product_attention  # noqa: PLC0415 (torch only when run)

    def leaves(layout):
        return [torch.randn(*layout, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3)]

    flash = leaves((shape.batch, shape.seqlen, shape.heads, shape.head_dim))
    sdpa = leaves((shape.batch, shape.heads, shape.seqlen, shape.head_dim))

    def sdpa_with(backend):
        def call():
            with sdpa_kernel(backend):
                return scaled_dot_product_attention(*sdpa, is_causal=shape.causal)

        return call

    def flash_with(function):
        return (lambda: function(*flash, causal=shape.causal), flash) if callable(function) else function

    return {
        **{package: flash_with(function) for package, function in flash_functions.items()},
        "sdpa-flash": (sdpa_with(SDPBackend.FLASH_ATTENTION), sdpa),
        "sdpa-efficient": (sdpa_with(SDPBackend.EFFICIENT_ATTENTION), sdpa),
        "sdpa-cudnn": (sdpa_with(SDPBackend.CUDNN_ATTENTION), sdpa),
    }


class _Rates(TypedDict):
    """One direction's numbers for one shape, by implementation."""

    tflops: dict[str, float | None]
    errors: dict[str, str]


def measure(
    shape: Shape,
    dtype: torch.dtype,
    *,
    repeats: int,
    flash_functions: dict[str, Callable[..., Any] | str],
    pairs: Sequence[tuple[str, str]],
    peak: float | None = None,
) -> list[dict]:
    """Two records (fwd, bwd) for one shape: TFLOP/s per implementation, or the error that stopped it."""
    import torch  # noqa: PLC0415 (torch only when run)

    records: dict[str, _Rates] = {d: {"tflops": {}, "errors": {}} for d in ("fwd", "bwd")}
    for name, call in _attention_calls(shape, dtype, flash_functions).items():
        if isinstance(call, str):
            for record in records.values():
                record["tflops"][name], record["errors"][name] = None, call
            continue
        forward, leaves = call
        try:
            ms = mean_ms(forward, calls=repeats)
            records["fwd"]["tflops"][name] = shape.flops("fwd") / ms / 1e9
            out = forward()
            grad = torch.randn_like(out)

            def clear_grads(leaves: list[torch.Tensor] = leaves) -> None:
                for leaf in leaves:
                    leaf.grad = None

            ms = mean_ms(partial(out.backward, grad, retain_graph=True), calls=repeats, before=clear_grads)
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
            "ratios": ratios(record["tflops"], pairs),
            "peak_fraction": {
                name: (rate / peak if rate and peak else None) for name, rate in record["tflops"].items()
            },
            "errors": record["errors"],
        }
        for direction, record in records.items()
    ]


def ratios(tflops: dict, pairs: Sequence[tuple[str, str]]) -> dict:
    """Each of `pairs` (ratio_pairs) as a speed-up (None where either did not run)."""
    return {f"{a}/{b}": (tflops[a] / tflops[b] if tflops.get(a) and tflops.get(b) else None) for a, b in pairs}


def run_benchmark(
    families: Sequence[GpuFamily],
    *,
    dtype_name: str = "bf16",
    seqlens: Sequence[int] = SEQLENS,
    head_dims: Sequence[int] = HEAD_DIMS,
    repeats: int = 10,
    progress: Callable[[Shape], object] = lambda shape: None,
) -> list[dict]:
    import torch  # noqa: PLC0415 (torch only when run)

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(0)
    functions, peak, pairs = installed(families), dense_peak(torch.cuda.get_device_name(0)), ratio_pairs(families)
    results = []
    for shape in shapes(seqlens, head_dims):
        progress(shape)
        results += measure(shape, dtype, repeats=repeats, flash_functions=functions, pairs=pairs, peak=peak)
    return results
