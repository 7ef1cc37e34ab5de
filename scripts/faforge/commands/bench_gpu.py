"""Benchmark flash-attn and flash-attn-3 against PyTorch SDPA (flash, efficient, cuDNN): TFLOP/s, ratios, peak fraction.

Forward and backward on the same shapes in one run: batch x seqlen = 16k tokens
for seqlen 512 .. 16k, causal and not, head dims 64 and 128, or those of 64/128/256 an
installed flash-attn-3 declares (see faforge.gpu.bench). Exit 0 when every installed
flash-attn family ran on every shape it declares, 1 when one failed (an SDPA backend
that cannot take a shape, or a family not installed, is n/a, not a failure), 3 when
there is no usable GPU for either family, with the reason. The nvcc (ptxas) that
compiled flash-attn-3 is printed beside its numbers when its package declares it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from faforge import paths
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, EXIT_SKIPPED
from faforge.families.flash_attn_3 import gpu_gate as fa3_gate
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.gpu import bench
from faforge.gpu.gate import evaluate
from faforge.options import int_range, positive_ints
from faforge.table import format_table

SCHEMA_VERSION = 1
# Head dims benchmarked for a full flash-attn-3: of these, those its package declares.
FA3_HEAD_DIMS = (64, 128, 256)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16", help="default: bf16")
    parser.add_argument(
        "--seqlens", type=positive_ints, default=bench.SEQLENS, help="comma-separated (default: 512,...,16384)"
    )
    parser.add_argument(
        "--head-dims",
        type=positive_ints,
        default=None,
        help=f"comma-separated (default: 64,128; with {FLASH_ATTN_3.package} "
        "installed, those of 64,128,256 it declares)",
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


def format_results(results: list[dict]) -> str:
    leads = (FLASH_ATTN_3.package, FLASH_ATTN.package)
    headers = [
        "seqlen",
        "batch",
        "hdim",
        "causal",
        "direction",
        *bench.IMPLEMENTATIONS,
        *(f"{p} % peak" for p in leads),
        *results[0]["ratios"],
    ]
    rows = [
        [r["seqlen"], r["batch"], r["head_dim"], "yes" if r["causal"] else "no", r["direction"]]
        + [_fmt(r["tflops"][name], ".1f") for name in bench.IMPLEMENTATIONS]
        + [_fmt(r["peak_fraction"][p] and 100 * r["peak_fraction"][p], ".0f") for p in leads]
        + [_fmt(ratio, ".2f") + ("x" if ratio else "") for ratio in r["ratios"].values()]
        for r in results
    ]
    errors = sorted({f"{name}: {message}" for r in results for name, message in r["errors"].items()})
    return "\n".join(
        [
            f"TFLOP/s ({', '.join(bench.IMPLEMENTATIONS)}), % of the dense peak, and speed-ups",
            format_table(headers, rows),
            *errors,
        ]
    )


def failures(results: list[dict], fa2_usable: bool, fa3: fa3_gate.Fa3Gate) -> list[str]:
    """The runs an installed, usable family should have made and did not."""
    expected = {
        FLASH_ATTN.package: lambda r: fa2_usable,
        FLASH_ATTN_3.package: lambda r: fa3.usable and r["head_dim"] in fa3.head_dims,
    }
    return [
        f"{name} {r['direction']} seqlen {r['seqlen']} hdim {r['head_dim']}"
        for r in results
        for name, wanted in expected.items()
        if wanted(r) and r["tflops"][name] is None
    ]


def execute(args: argparse.Namespace) -> int:
    if args.report_dir:  # before the GPU gate: a wrong path is bad input (2) even where nothing could run (3)
        paths.output_dir(args.report_dir, "--report-dir")
    gate, fa3 = evaluate(), fa3_gate.evaluate()
    usable = gate if gate.usable or not fa3.usable else fa3
    head_dims = args.head_dims or (
        tuple(h for h in FA3_HEAD_DIMS if h in fa3.head_dims) or fa3.head_dims if fa3.usable else bench.HEAD_DIMS
    )
    report = {
        "version": SCHEMA_VERSION,
        "status": "skipped",
        "reason": usable.reason if not usable.usable else None,
        "gate": gate.to_json(),
        "fa3_gate": fa3.to_json(),
        "dtype": args.dtype,
        "peak_tflops": bench.dense_peak(usable.device),
        "nvcc": {FLASH_ATTN_3.package: fa3.declared.get("nvcc")},
        "results": [],
    }
    if usable.usable:

        def progress(shape: bench.Shape) -> None:
            print(f"+ {shape}", file=sys.stderr, flush=True)

        report["results"] = bench.run_benchmark(
            dtype_name=args.dtype, seqlens=args.seqlens, head_dims=head_dims, repeats=args.repeats, progress=progress
        )
        failed = failures(report["results"], gate.usable, fa3)
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
        built = report["nvcc"][FLASH_ATTN_3.package]
        print(
            f"{usable.device} ({args.dtype}, torch {usable.torch}; "
            f"dense peak {_fmt(report['peak_tflops'], '.0f')} TFLOP/s; "
            f"{FLASH_ATTN_3.package} built by nvcc/ptxas {built or 'not declared'})"
        )
        print(format_results(report["results"]))
    if report["status"] != "passed":
        print(f"{report['status'].upper()}: {report['reason']}", file=sys.stderr)
    return {"passed": EXIT_OK, "failed": EXIT_PROBLEMS, "skipped": EXIT_SKIPPED}[report["status"]]
