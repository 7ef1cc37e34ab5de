"""The FA4 suite's marker, its gate's verdict in pytest's header, the FA4 kernels each test launched (for
test-gpu's report), and the first calls' times written to first_calls.json beside kernels.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

from faforge.families.flash_attn_4.gpu import kernel_of
from faforge.families.flash_attn_4.gpu_gate import evaluate
from faforge.family import FLASH_ATTN_4
from faforge.gpu.coverage import KERNELS_JSON_ENV
from faforge.gpu.suite_hooks import conftest_hooks

FIRST_CALLS_JSON = "first_calls.json"

globals().update(conftest_hooks(evaluate, kernel_of, f"an installed {FLASH_ATTN_4.package}", "FA4 GPU gate"))
_record_kernels_finish = globals()["pytest_sessionfinish"]


def pytest_sessionfinish(session):
    """Also write the seconds each kernel's first call took (the DSL's compile) where test-gpu keeps its reports."""
    _record_kernels_finish(session)
    gate, where = evaluate(), os.environ.get(KERNELS_JSON_ENV)
    if where and gate.first_calls:
        record = {"version": 1, "package": FLASH_ATTN_4.package, "device": gate.device}
        record["first_calls_s"] = gate.first_calls
        (Path(where).parent / FIRST_CALLS_JSON).write_text(json.dumps(record, indent=1) + "\n")
