"""The benchmark's shapes, FLOP counts, ratios and table (pure functions; timing needs a GPU)."""

from __future__ import annotations

import time

import pytest

from faforge.commands.bench_gpu import format_results
from faforge.gpu import bench
from faforge.gpu.bench import HIDDEN, IMPLEMENTATIONS, TOTAL_TOKENS, Shape, ratios, shapes


def test_shapes_keep_16k_tokens_and_cover_the_grid():
    grid = shapes()
    assert {s.seqlen for s in grid} == {512, 1024, 2048, 4096, 8192, 16384}
    assert {s.head_dim for s in grid} == {64, 128} and {s.causal for s in grid} == {False, True}
    assert all(s.batch * s.seqlen == TOTAL_TOKENS and s.heads * s.head_dim == HIDDEN for s in grid)
    assert len(grid) == 24


def test_flops_follow_upstream_counting():
    shape = Shape(batch=2, seqlen=8192, heads=16, head_dim=128, causal=False)
    assert shape.flops("fwd") == 4 * 2 * 8192**2 * 16 * 128
    assert shape.flops("bwd") == 2.5 * shape.flops("fwd")
    causal = Shape(batch=2, seqlen=8192, heads=16, head_dim=128, causal=True)
    assert causal.flops("fwd") == shape.flops("fwd") / 2


def test_ratios_are_none_where_a_backend_did_not_run():
    assert ratios({"flash-attn": 400.0, "sdpa-flash": 200.0, "sdpa-efficient": None}) == {
        "flash-attn/sdpa-flash": 2.0,
        "flash-attn/sdpa-efficient": None,
    }


def test_table_shows_ratios_and_errors():
    record = {
        "batch": 8, "seqlen": 2048, "heads": 16, "head_dim": 128, "causal": True, "direction": "bwd",
        "tflops": dict(zip(IMPLEMENTATIONS, (300.0, 150.0, None))),
        "ratios": {"flash-attn/sdpa-flash": 2.0, "flash-attn/sdpa-efficient": None},
        "errors": {"sdpa-efficient": "No available kernel."},
    }  # fmt: skip
    table = format_results([record])
    row = next(line for line in table.splitlines() if line.startswith("2048"))
    assert row.split() == ["2048", "8", "128", "yes", "bwd", "300.0", "150.0", "n/a", "2.00x", "n/a"]
    assert "sdpa-efficient: No available kernel." in table


@pytest.mark.gpu
def test_mean_ms_warms_up_at_least_100_ms_then_times_back_to_back_calls():
    torch = pytest.importorskip("torch", reason="needs torch with CUDA")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible to torch")
    calls = []
    x = torch.randn(2048, 2048, device="cuda")
    started = time.perf_counter()
    ms = bench.mean_ms(lambda: calls.append(x @ x), calls=20)
    assert time.perf_counter() - started >= bench.WARMUP_S
    assert len(calls) > 20 and ms > 0
