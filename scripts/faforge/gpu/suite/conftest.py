"""Registers the suite's marker, prints the GPU gate's verdict in pytest's header, and records which
flash-attn kernel TUs each test launched (torch.profiler's kernel names, faforge.gpu.dispatch.tu_of_kernel)
into the JSON file named by FAFORGE_GPU_KERNELS_JSON, for faforge.gpu.coverage to compare with the emulation."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from faforge.family import FLASH_ATTN
from faforge.gpu.coverage import KERNELS_JSON_ENV
from faforge.gpu.dispatch import tu_of_kernel
from faforge.gpu.gate import evaluate

_SEEN: dict[str, list[str]] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", f"gpu: needs a CUDA GPU and a built {FLASH_ATTN.package}; skipped with a reason otherwise")


def pytest_report_header(config):
    gate = evaluate()
    return [f"faforge GPU gate {'open' if gate.usable else 'closed'}: {gate.reason}", *gate.defects, *gate.notes]


@pytest.fixture(autouse=True)
def record_kernels(request):
    """Profile the test's CUDA kernels when asked to (the profiler costs time; test-gpu asks)."""
    if not os.environ.get(KERNELS_JSON_ENV) or not evaluate().usable:
        yield
        return
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415  (only on a usable GPU)

    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        yield
    names = {event.key for event in profiler.key_averages()}
    _SEEN[request.node.nodeid] = sorted({tu for tu in map(tu_of_kernel, names) if tu})


def pytest_sessionfinish(session):
    path = os.environ.get(KERNELS_JSON_ENV)
    if path and evaluate().usable:
        import torch  # noqa: PLC0415

        sms = torch.cuda.get_device_properties(0).multi_processor_count
        Path(path).write_text(json.dumps({"sms": sms, "tests": _SEEN}, indent=1) + "\n")
