"""The pytest hooks every family's GPU suite installs from its conftest (faforge.gpu.stage.GpuFamily.suite):
the `gpu` marker, the gate's verdict in pytest's header, each test's kernel TUs recorded
for test-gpu's coverage (faforge.gpu.coverage.KernelRecorder), and the declaration test, which is not
behind the gate's skip: a binary lacking what its package declares fails (exit 1), never skips (3).
Imported only inside a suite run, where pytest exists."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from faforge.gpu.coverage import KernelRecorder


def conftest_hooks(evaluate: Callable, tu_of_kernel: Callable[[str], str | None], needs: str, title: str) -> dict:
    """{hook name: function} for a conftest's namespace (`globals().update(...)`)."""
    recorder = KernelRecorder(evaluate().usable, tu_of_kernel)

    def pytest_configure(config):
        config.addinivalue_line("markers", f"gpu: needs a CUDA GPU and {needs}; skipped with a reason otherwise")

    def pytest_report_header(config):
        gate = evaluate()
        return [f"faforge {title} {'open' if gate.usable else 'closed'}: {gate.reason}", *gate.defects, *gate.notes]

    @pytest.fixture(autouse=True)
    def record_kernels(request):
        """Profile the test's CUDA kernels when asked to (the profiler costs time; test-gpu asks)."""
        with recorder.record(request.node.nodeid):
            yield

    def pytest_sessionfinish(session):
        recorder.write()

    return {
        "pytest_configure": pytest_configure,
        "pytest_report_header": pytest_report_header,
        "record_kernels": record_kernels,
        "pytest_sessionfinish": pytest_sessionfinish,
    }


def check_declaration_kept(evaluate: Callable) -> None:
    """The body of each suite's declaration test."""
    gate = evaluate()
    if gate.extension is None:
        pytest.skip(gate.reason)
    assert not gate.defects, "; ".join(gate.defects)
