"""FlashAttention-3's GPU stage (a faforge.gpu.stage.GpuFamily): its suite (gpu_suite/), its gate (gpu_gate: the
package declares its archs and TUs in its config module, so it takes no --declared-* options), its kernel
coverage (every declared TU must launch: there is no dispatch emulation to compare with) and its benchmark
entry. Standard library only: `python -m faforge.gpu.run_suite --family flash-attn-3` imports it in a bare venv."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from faforge.families.flash_attn_3 import gpu_gate
from faforge.families.flash_attn_3.gpu_gate import Fa3Gate
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.gpu import builtin
from faforge.gpu.stage import attention_function as _attention_function

package = FLASH_ATTN_3.package
suite = Path(__file__).resolve().parent / "gpu_suite"
declares_in: str | None = f"{FLASH_ATTN_3.config_module}.py"
coverage_fails = True
gate_key = "fa3_gate"
bench_baselines = (FLASH_ATTN.package, "sdpa-flash", "sdpa-cudnn")
# Head dims benchmarked for a full flash-attn-3: of these, those its package declares.
BENCH_HEAD_DIMS = (64, 128, 256)
bench_note: str | None = f"with {package} installed, those of {','.join(map(str, BENCH_HEAD_DIMS))} it declares"
evaluate = gpu_gate.evaluate


def coverage(observed: dict, gate: Fa3Gate) -> dict:
    """The declared .cu TUs against those the profiler saw (same shape as faforge.gpu.coverage.compare's)."""
    seen = set().union(*map(set, observed["tests"].values())) if observed["tests"] else set()
    declared = sorted(tu for tu in gate.tus if tu.endswith(".cu"))
    return {
        "sms": observed["sms"],
        "package_tus": len(declared),
        "expected_tus": declared,
        "seen_tus": sorted(seen),
        "never_seen": sorted(set(declared) - seen),
        "mismatches": [],
    }


def attention_function() -> Callable[..., Any] | str:
    return _attention_function(FLASH_ATTN_3.interface_module, builtin.ATTENTION_FUNCTION)


def bench_head_dims(gate: Fa3Gate) -> tuple[int, ...] | None:
    if not gate.usable:
        return None
    return tuple(h for h in BENCH_HEAD_DIMS if h in gate.head_dims) or gate.head_dims


def bench_expects(gate: Fa3Gate, head_dim: int) -> bool:
    return gate.usable and head_dim in gate.head_dims


def built_by(gate: Fa3Gate) -> dict[str, str | None]:
    return {package: gate.declared.get("nvcc")}
