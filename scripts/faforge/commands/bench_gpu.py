"""Benchmark each flash-attn family against PyTorch SDPA (flash, efficient, cuDNN): TFLOP/s, ratios, peak fraction.

Forward and backward on the same shapes in one run: batch x seqlen = 16k tokens
for seqlen 512 .. 16k, causal and not, head dims 64 and 128, or those an installed
family's package asks for (faforge.gpu.stage.GpuFamily.bench_head_dims; see faforge.gpu.bench).
Exit 0 when every installed flash-attn family ran on every shape it declares, 1 when one
failed (an SDPA backend that cannot take a shape, or a family not installed, is n/a, not a
failure), 3 when there is no usable GPU for any family, with the reason. The nvcc (ptxas)
that compiled a family's package is printed beside its numbers when its package declares it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from faforge import paths
from faforge.commands.test_gpu import gpu_families
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED
from faforge.gpu import bench
from faforge.gpu.stage import GpuFamily
from faforge.options import int_range, positive_ints
from faforge.table import format_table

SCHEMA_VERSION = 1


def configure_parser(parser: argparse.ArgumentParser) -> None:
    families = gpu_families()
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="default: bf16")
    parser.add_argument(
        "--seqlens", type=positive_ints, default=bench.SEQLENS, help="comma-separated (default: 512,...,16384)"
    )
    parser.add_argument(
        "--head-dims",
        type=positive_ints,
        default=None,
        help=f"comma-separated (default: {'; '.join(['64,128', *filter(None, (f.bench_note for f in families))])})",
    )
    parser.add_argument(
        "--repeats",
        type=int_range(1, 100_000),
        default=10,
        help="calls timed back to back between two CUDA events, after "
        ">= 100 ms of warm-up; their mean is kept (default: 10)",
    )
    parser.add_argument("--report-dir", type=Path, help="also write bench.json there")
    parser.add_argument("--json", action="store_true", help="print JSON (schema: tests/schemas/bench-gpu.json)")


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def format_results(results: list[dict], families: Sequence[GpuFamily]) -> str:
    leads = [family.package for family in reversed(families)]
    implementations = bench.implementations(families)
    headers = [
        "seqlen",
        "batch",
        "hdim",
        "causal",
        "direction",
        *implementations,
        *(f"{p} % peak" for p in leads),
        *results[0]["ratios"],
    ]
    rows = [
        [r["seqlen"], r["batch"], r["head_dim"], "yes" if r["causal"] else "no", r["direction"]]
        + [_fmt(r["tflops"][name], ".1f") for name in implementations]
        + [_fmt(r["peak_fraction"][p] and 100 * r["peak_fraction"][p], ".0f") for p in leads]
        + [_fmt(ratio, ".2f") + ("x" if ratio else "") for ratio in r["ratios"].values()]
        for r in results
    ]
    errors = sorted({f"{name}: {message}" for r in results for name, message in r["errors"].items()})
    return "\n".join(
        [
            f"TFLOP/s ({', '.join(implementations)}), % of the dense peak, and speed-ups",
            format_table(headers, rows),
            *errors,
        ]
    )


def failures(results: list[dict], gates: dict[str, Any], families: Sequence[GpuFamily]) -> list[str]:
    """The runs an installed, usable family should have made and did not (`gates`: by package)."""
    return [
        f"{family.package} {r['direction']} seqlen {r['seqlen']} hdim {r['head_dim']}"
        for r in results
        for family in families
        if family.bench_expects(gates[family.package], r["head_dim"]) and r["tflops"][family.package] is None
    ]


def execute(args: argparse.Namespace) -> int:
    if args.report_dir:  # before the GPU gate: a wrong path is bad input (2) even where nothing could run (3)
        paths.output_dir(args.report_dir, "--report-dir")
    families = gpu_families()
    gates = {family.package: family.evaluate() for family in families}
    usable = next((gate for gate in gates.values() if gate.usable), gates[families[0].package])
    head_dims = args.head_dims or next(
        (dims for family in families if (dims := family.bench_head_dims(gates[family.package]))), bench.HEAD_DIMS
    )
    nvcc: dict[str, str | None] = {}
    for family in families:
        nvcc |= family.built_by(gates[family.package])
    report = {
        "version": SCHEMA_VERSION,
        "status": "skipped",
        "reason": usable.reason if not usable.usable else None,
        **{family.gate_key: gates[family.package].to_json() for family in families},
        "dtype": args.dtype,
        "peak_tflops": bench.dense_peak(usable.device),
        "nvcc": nvcc,
        "results": [],
    }
    if usable.usable:

        def progress(shape: bench.Shape) -> None:
            print(f"+ {shape}", file=sys.stderr, flush=True)

        report["results"] = bench.run_benchmark(
            families,
            dtype_name=args.dtype,
            seqlens=args.seqlens,
            head_dims=head_dims,
            repeats=args.repeats,
            progress=progress,
        )
        failed = failures(report["results"], gates, families)
        report["status"] = "failed" if failed else "passed"
        report["reason"] = (
            f"{len(failed)} of the runs an installed package should have made failed, e.g. {failed[0]}"
            if failed
            else None
        )
    if args.report_dir:
        with paths.user_path("--report-dir", args.report_dir):
            (args.report_dir / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    elif report["results"]:
        built = "".join(f"; {package} built by nvcc/ptxas {by or 'not declared'}" for package, by in nvcc.items())
        print(
            f"{usable.device} ({args.dtype}, torch {usable.torch}; "
            f"dense peak {_fmt(report['peak_tflops'], '.0f')} TFLOP/s{built})"
        )
        print(format_results(report["results"], families))
    if report["status"] != "passed":
        print(f"{report['status'].upper()}: {report['reason']}", file=sys.stderr)
    return {"passed": EXIT_OK, "failed": EXIT_PROBLEMS, "skipped": EXIT_SKIPPED}[report["status"]]
