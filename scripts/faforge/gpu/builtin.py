"""The GPU stage of the package this folder was written for (flash-attn): its suite (faforge/gpu/suite), its gate
(faforge.gpu.gate, which takes --declared-archs/--declared-head-dims) and its kernel coverage against the emulated
dispatch (faforge.gpu.coverage.compare). A GpuFamily (faforge.gpu.stage); shipped with the recipe, so that
`python -m faforge.gpu.run_suite` runs it without faforge's families."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from faforge.family import FLASH_ATTN
from faforge.gpu import gate as _gate
from faforge.gpu.coverage import compare
from faforge.gpu.stage import attention_function as _attention_function

package = FLASH_ATTN.package
suite = Path(__file__).resolve().parent / "suite"
declares_in: str | None = None
coverage_fails = False
gate_key = "gate"
bench_baselines = ("sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
# upstream's dense entry point (flash_attn/__init__.py), the same name in every flash-attn family's interface
ATTENTION_FUNCTION = f"{FLASH_ATTN.module}_func"
bench_note: str | None = None
evaluate = _gate.evaluate


def coverage(observed: dict, gate: _gate.Gate) -> dict:
    return compare(observed, gate.head_dims)


def attention_function() -> Callable[..., Any] | str:
    return _attention_function(FLASH_ATTN.module, ATTENTION_FUNCTION)


def bench_head_dims(gate: _gate.Gate) -> tuple[int, ...] | None:
    return None


def bench_expects(gate: _gate.Gate, head_dim: int) -> bool:
    return gate.usable


def built_by(gate: _gate.Gate) -> dict[str, str | None]:
    return {}
