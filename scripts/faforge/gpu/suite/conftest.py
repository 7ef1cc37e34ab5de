"""Registers the suite's marker, prints the GPU gate's verdict in pytest's header, and records which
flash-attn kernel TUs each test launched (torch.profiler's kernel names, faforge.gpu.dispatch.tu_of_kernel)
into the JSON file named by FAFORGE_GPU_KERNELS_JSON, for faforge.gpu.coverage to compare with the emulation."""

from __future__ import annotations

import pytest

from faforge.family import FLASH_ATTN
from faforge.gpu.coverage import KernelRecorder
from faforge.gpu.dispatch import tu_of_kernel
from faforge.gpu.gate import evaluate

_RECORDER = KernelRecorder(evaluate().usable, tu_of_kernel)


def pytest_configure(config):
    config.addinivalue_line("markers", f"gpu: needs a CUDA GPU and a built {FLASH_ATTN.package}; skipped with a reason otherwise")


def pytest_report_header(config):
    gate = evaluate()
    return [f"faforge GPU gate {'open' if gate.usable else 'closed'}: {gate.reason}", *gate.defects, *gate.notes]


@pytest.fixture(autouse=True)
def record_kernels(request):
    """Profile the test's CUDA kernels when asked to (the profiler costs time; test-gpu asks)."""
    with _RECORDER.record(request.node.nodeid):
        yield


def pytest_sessionfinish(session):
    _RECORDER.write()
