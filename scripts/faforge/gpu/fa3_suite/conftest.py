"""The FA3 suite's marker, its gate's verdict in pytest's header, and the FA3 TUs each test launched
(torch.profiler's kernel names, faforge.gpu.fa3_kernels.tu_of_kernel) for test-gpu's coverage check."""

from __future__ import annotations

import pytest

from faforge.family import FLASH_ATTN_3
from faforge.gpu.coverage import KernelRecorder
from faforge.gpu.fa3_gate import evaluate
from faforge.gpu.fa3_kernels import tu_of_kernel

_RECORDER = KernelRecorder(evaluate().usable, lambda name: tu_of_kernel(name, evaluate().tus))


def pytest_configure(config):
    config.addinivalue_line("markers", f"gpu: needs a CUDA GPU and an installed {FLASH_ATTN_3.package}; skipped with a reason otherwise")


def pytest_report_header(config):
    gate = evaluate()
    return [f"faforge FA3 GPU gate {'open' if gate.usable else 'closed'}: {gate.reason}", *gate.defects, *gate.notes]


@pytest.fixture(autouse=True)
def record_kernels(request):
    with _RECORDER.record(request.node.nodeid):
        yield


def pytest_sessionfinish(session):
    _RECORDER.write()
