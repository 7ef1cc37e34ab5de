"""Registers the suite's marker and prints the GPU gate's verdict in pytest's header."""

from __future__ import annotations

from faforge.gpu.gate import evaluate


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU and a built flash-attn; skipped with a reason otherwise")


def pytest_report_header(config):
    gate = evaluate()
    return [f"faforge GPU gate {'open' if gate.usable else 'closed'}: {gate.reason}", *gate.notes]
