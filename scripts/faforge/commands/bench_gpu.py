"""Benchmark flash-attn against PyTorch SDPA (flash and efficient backends): TFLOP/s and ratios; exit 3 without a GPU.

Forward and backward on the same shapes in one run: batch x seqlen = 16k tokens
for seqlen 512 .. 16k, head dim 64 and 128, causal and not (see faforge.gpu.bench).
Exit 0 when flash-attn ran on every shape, 1 when it failed on one (an SDPA
backend that cannot take a shape is shown as n/a, not as a failure), 3 when
there is no usable GPU, with the reason.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from faforge import paths
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED
from faforge.family import FLASH_ATTN
from faforge.gpu import bench
from faforge.gpu.gate import evaluate
from faforge.options import int_range, positive_ints
from faforge.table import format_table

SCHEMA_VERSION = 1


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="default: bf16")
    parser.add_argument("--seqlens", type=positive_ints, default=bench.SEQLENS, help="comma-separated (default: 512,...,16384)")
    parser.add_argument("--head-dims", type=positive_ints, default=bench.HEAD_DIMS, help="comma-separated (default: 64,128)")
    parser.add_argument("--repeats", type=int_range(1, 100_000), default=10, help="calls timed back to back between two CUDA events, after >= 100 ms of warm-up; their mean is kept (default: 10)")
    parser.add_argument("--report-dir", type=Path, help="also write bench.json there")
    parser.add_argument("--json", action="store_true", help="print JSON (schema: tests/schemas/bench-gpu.json)")


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def format_results(results: list[dict]) -> str:
    headers = ["seqlen", "batch", "hdim", "causal", "direction", *bench.IMPLEMENTATIONS, "vs sdpa-flash", "vs sdpa-efficient"]
    rows = [
        [r["seqlen"], r["batch"], r["head_dim"], "yes" if r["causal"] else "no", r["direction"]]
        + [_fmt(r["tflops"][name], ".1f") for name in bench.IMPLEMENTATIONS]
        + [_fmt(ratio, ".2f") + ("x" if ratio else "") for ratio in r["ratios"].values()]
        for r in results
    ]
    errors = sorted({f"{name}: {message}" for r in results for name, message in r["errors"].items()})
    return "\n".join([f"TFLOP/s ({', '.join(bench.IMPLEMENTATIONS)}) and {FLASH_ATTN.package}'s speed-up", format_table(headers, rows), *errors])


def execute(args: argparse.Namespace) -> int:
    if args.report_dir:  # before the GPU gate: a wrong path is bad input (2) even where nothing could run (3)
        paths.output_dir(args.report_dir, "--report-dir")
    gate = evaluate()
    report = {"version": SCHEMA_VERSION, "status": "skipped", "reason": gate.reason, "gate": gate.to_json(), "dtype": args.dtype, "results": []}
    if gate.usable:
        def progress(shape: bench.Shape) -> None:
            print(f"+ {shape}", file=sys.stderr, flush=True)

        report["results"] = bench.run_benchmark(
            dtype_name=args.dtype, seqlens=args.seqlens, head_dims=args.head_dims, repeats=args.repeats, progress=progress
        )
        failed = [r for r in report["results"] if r["tflops"][FLASH_ATTN.package] is None]
        report["status"] = "failed" if failed else "passed"
        report["reason"] = f"{FLASH_ATTN.package} failed on {len(failed)} of {len(report['results'])} runs" if failed else None
    if args.report_dir:
        with paths.user_path("--report-dir", args.report_dir):
            (args.report_dir / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    elif report["results"]:
        print(f"{gate.device} ({args.dtype}, torch {gate.torch})")
        print(format_results(report["results"]))
    if report["status"] != "passed":
        print(f"{report['status'].upper()}: {report['reason']}", file=sys.stderr)
    return {"passed": EXIT_OK, "failed": EXIT_PROBLEMS, "skipped": EXIT_SKIPPED}[report["status"]]
