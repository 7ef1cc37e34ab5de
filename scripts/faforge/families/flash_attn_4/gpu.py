"""FlashAttention-4's GPU stage (a faforge.gpu.stage.GpuFamily): its suite (gpu_suite/), its gate (gpu_gate: no
binary and no declaration, so no --declared-* options and no kernel TUs to cover) and its benchmark entry.

FA4 compiles each kernel on its first call (the CuTe DSL's JIT), which takes seconds, not microseconds: the
benchmark's function times every first call of a new shape class apart and records it in the gate's
`first_calls` (bench-gpu's JSON, fa4_gate), and bench-gpu's warm-up runs before its timed calls, so the compile
is never in a TFLOP/s figure. Standard library only at module level."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faforge.families.flash_attn_4 import gpu_gate
from faforge.families.flash_attn_4.gpu_gate import HEAD_DIMS, Fa4Gate
from faforge.family import FLASH_ATTN, FLASH_ATTN_3, FLASH_ATTN_4
from faforge.gpu import builtin
from faforge.gpu.stage import attention_function as _attention_function

package = FLASH_ATTN_4.package
suite = Path(__file__).resolve().parent / "gpu_suite"
declares_in: str | None = "its wheel (pure Python: the kernels are compiled on first call)"
coverage_fails = False
gate_key = "fa4_gate"
bench_baselines = (FLASH_ATTN_3.package, FLASH_ATTN.package, "sdpa-flash", "sdpa-cudnn")
bench_note: str | None = f"with {package} installed, {','.join(map(str, HEAD_DIMS))}"
evaluate = gpu_gate.evaluate
# The CuTe DSL kernel classes FA4 launches (FlashAttentionForwardSm90, FlashAttentionBackwardSm100, ...).
KERNEL = re.compile(r"FlashAttention[A-Za-z]+?(?:Sm[0-9]+|(?![A-Za-z]))")


def kernel_of(name: str) -> str | None:
    """The FA4 kernel class in a profiler kernel name, None for others' kernels."""
    found = KERNEL.search(name)
    return found.group(0) if found else None


def coverage(observed: dict, gate: Fa4Gate) -> dict:
    """The FA4 kernels the profiler saw; nothing is declared, so nothing can be missing (a report)."""
    seen = sorted(set().union(*map(set, observed["tests"].values()))) if observed["tests"] else []
    return {
        "sms": observed["sms"],
        "package_tus": 0,
        "expected_tus": [],
        "seen_tus": seen,
        "never_seen": [],
        "mismatches": [],
    }


def timed_first_calls(function: Callable[..., Any], record: dict[str, float]) -> Callable[..., Any]:
    """`function(q, k, v, causal=...)` that records in `record` the seconds of the first call of each shape class
    the DSL compiles for (dtype, head dim, causal, with or without gradients), synchronized."""

    def call(q: Any, k: Any, v: Any, *, causal: bool = False) -> Any:
        key = f"fwd {str(q.dtype).removeprefix('torch.')} hdim{q.shape[-1]} causal={causal} grad={q.requires_grad}"
        if key in record:
            return _output(function(q, k, v, causal=causal))
        import torch  # noqa: PLC0415 (only on a GPU)

        torch.cuda.synchronize()
        started = time.perf_counter()
        try:
            out = _output(function(q, k, v, causal=causal))
        except (AssertionError, ValueError, TypeError) as exc:  # FA4 refuses a shape this way
            raise RuntimeError(f"{package}: {type(exc).__name__}: {exc}") from exc  # n/a in bench-gpu, not a crash
        torch.cuda.synchronize()
        record[key] = round(time.perf_counter() - started, 3)
        return out

    return call


def _output(result: Any) -> Any:
    """FA4's flash_attn_func returns (out, lse) in some releases and out in others."""
    return result[0] if isinstance(result, tuple) else result


def attention_function() -> Callable[..., Any] | str:
    function = _attention_function(FLASH_ATTN_4.module, builtin.ATTENTION_FUNCTION)
    if isinstance(function, str):
        return function
    gate = evaluate()
    if not gate.usable:  # e.g. flash_attn.cute is flash-attn 2's copy: not FA4's numbers
        return f"not usable here ({gate.reason})"
    return timed_first_calls(function, gate.first_calls)


def bench_head_dims(gate: Fa4Gate) -> tuple[int, ...] | None:
    return HEAD_DIMS if gate.usable else None


def bench_expects(gate: Fa4Gate, head_dim: int) -> bool:
    return gate.usable and head_dim in HEAD_DIMS


def built_by(gate: Fa4Gate) -> dict[str, str | None]:
    return {}
