"""The benchmark's shapes, FLOP counts, ratios and table (pure functions; timing needs a GPU)."""

from __future__ import annotations

import time

import pytest

from faforge.commands.bench_gpu import failures, format_results
from faforge.families.flash_attn_3 import gpu as fa3_gpu
from faforge.families.flash_attn_3.gpu_gate import Fa3Gate
from faforge.gpu import bench, builtin
from faforge.gpu.bench import HIDDEN, TOTAL_TOKENS, Shape, implementations, ratio_pairs, ratios, shapes
from faforge.gpu.gate import Gate

FAMILIES = (builtin, fa3_gpu)  # the registry's order: flash-attn, then flash-attn-3
IMPLEMENTATIONS = implementations(FAMILIES)


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
    got = ratios(
        {"flash-attn": 400.0, "flash-attn-3": 700.0, "sdpa-flash": 200.0, "sdpa-efficient": None, "sdpa-cudnn": 350.0},
        ratio_pairs(FAMILIES),
    )
    assert got == {
        "flash-attn-3/flash-attn": 1.75,
        "flash-attn-3/sdpa-flash": 3.5,
        "flash-attn-3/sdpa-cudnn": 2.0,
        "flash-attn/sdpa-flash": 2.0,
        "flash-attn/sdpa-efficient": None,
        "flash-attn/sdpa-cudnn": 400.0 / 350.0,
    }


def test_the_dense_peak_is_known_for_hopper_and_ampere_only():
    assert bench.dense_peak("NVIDIA H200") == bench.dense_peak("NVIDIA H100 80GB HBM3") == 989.4
    assert bench.dense_peak("NVIDIA H100 PCIe") == 756.0 and bench.dense_peak("NVIDIA A100-SXM4-80GB") == 312.0
    assert bench.dense_peak("NVIDIA GeForce RTX 4090") is None and bench.dense_peak(None) is None


def test_table_shows_ratios_peak_fraction_and_errors():
    tflops = dict(zip(IMPLEMENTATIONS, (300.0, 660.0, 150.0, None, 330.0), strict=True))
    record = {
        "batch": 8, "seqlen": 2048, "heads": 16, "head_dim": 128, "causal": True, "direction": "bwd",
        "tflops": tflops, "ratios": ratios(tflops, ratio_pairs(FAMILIES)),
        "peak_fraction": {name: rate and rate / 989.4 for name, rate in tflops.items()},
        "errors": {"sdpa-efficient": "No available kernel."},
    }  # fmt: skip
    assert IMPLEMENTATIONS == ("flash-attn", "flash-attn-3", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
    table = format_results([record], FAMILIES)
    row = next(line for line in table.splitlines() if line.startswith("2048"))
    assert row.split() == [
        "2048",
        "8",
        "128",
        "yes",
        "bwd",
        "300.0",
        "660.0",
        "150.0",
        "n/a",
        "330.0",
        "67",
        "30",
        "2.20x",
        "4.40x",
        "2.00x",
        "2.00x",
        "n/a",
        "0.91x",
    ]
    assert "sdpa-efficient: No available kernel." in table


def test_a_family_that_should_have_run_and_did_not_is_a_failure():
    fa3 = Fa3Gate(True, "H200", declared={"build_flags": {"FLASHATTENTION_DISABLE_HDIM64": True}})
    runs = [
        {"direction": "fwd", "seqlen": 512, "head_dim": dim, "tflops": {"flash-attn": 1.0, "flash-attn-3": None}}
        for dim in (64, 128)
    ]
    fa2 = Gate(True, "H200")
    assert failures(runs, {"flash-attn": fa2, "flash-attn-3": fa3}, FAMILIES) == [
        "flash-attn-3 fwd seqlen 512 hdim 128"
    ]  # hdim 64 is not built: n/a, not a failure
    assert failures(runs, {"flash-attn": fa2, "flash-attn-3": Fa3Gate(False, "not installed")}, FAMILIES) == []


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
