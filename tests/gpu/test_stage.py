"""The GPU stage asks a family's namespace (faforge.gpu.stage.GpuFamily) for everything that differs: a family
that is neither flash-attn nor flash-attn-3 runs its own suite, coverage rule and benchmark entry through
the generic code."""

from __future__ import annotations

import io
import subprocess
import sys
from types import SimpleNamespace

import pytest

from faforge.commands.bench_gpu import failures, format_results
from faforge.commands.test_gpu import gpu_families
from faforge.errors import EXIT_OK, EXIT_PROBLEMS, FaforgeError
from faforge.families.flash_attn_3 import gpu as fa3_gpu
from faforge.families.registry import FAMILIES
from faforge.gpu import builtin
from faforge.gpu.bench import implementations, ratio_pairs, ratios
from faforge.gpu.stage import load, not_run_here
from faforge.gpu.suite_run import run

# A suite whose one test records the kernel TUs it "launched", as a family's conftest would.
SUITE = """\
import json, os
from pathlib import Path

def test_forward_against_sdpa():
    Path(os.environ["FAFORGE_GPU_KERNELS_JSON"]).write_text(json.dumps({"sms": 1, "tests": {"t": ["fwd"]}}))
"""


def jit_family(suite, *, coverage_fails: bool) -> SimpleNamespace:
    """A pure-Python family that JIT-compiles on first call: its own gate, suite and TUs (fwd, bwd)."""
    gate = SimpleNamespace(
        usable=True, reason="a GPU", torch="2.9", device="H100", defects=(), notes=(), to_json=lambda: {"usable": True}
    )
    return SimpleNamespace(
        package="jit-attn",
        suite=suite,
        declares_in="its own module",
        coverage_fails=coverage_fails,
        gate_key="jit_gate",
        bench_note=None,
        bench_baselines=("sdpa-flash",),
        evaluate=lambda: gate,
        coverage=lambda observed, gate: {"never_seen": sorted({"fwd", "bwd"} - set(observed["tests"]["t"]))},
        attention_function=lambda: "not installed here (JIT on first call)",
        bench_head_dims=lambda gate: None,
        bench_expects=lambda gate, head_dim: head_dim == 128,
        built_by=lambda gate: {},
    )


@pytest.mark.parametrize(("fails", "expected"), [(True, EXIT_PROBLEMS), (False, EXIT_OK)])
def test_a_new_family_runs_its_own_suite_and_coverage_rule(tmp_path, fails, expected):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_jit.py").write_text(SUITE)
    summary = run(None, output=io.StringIO(), family=jit_family(suite, coverage_fails=fails))
    assert summary["family"] == "jit-attn" and summary["gate"] == {"usable": True}
    assert summary["counts"]["passed"] == 1 and summary["kernel_coverage"] == {"never_seen": ["bwd"]}
    assert summary["exit_code"] == expected
    assert (summary["reason"] == "declared TUs never launched: bwd") is fails


def test_the_benchmark_columns_ratios_and_failures_come_from_the_families():
    jit = jit_family(None, coverage_fails=False)
    families = (builtin, jit)
    assert implementations(families) == ("flash-attn", "jit-attn", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn")
    pairs = ratio_pairs(families)
    assert pairs[0] == ("jit-attn", "sdpa-flash") and ("flash-attn", "sdpa-cudnn") in pairs
    tflops = {"flash-attn": 100.0, "jit-attn": None, "sdpa-flash": 50.0, "sdpa-efficient": 40.0, "sdpa-cudnn": 80.0}
    record = {
        "seqlen": 512, "batch": 32, "head_dim": 128, "causal": False, "direction": "fwd", "tflops": tflops,
        "ratios": ratios(tflops, pairs), "peak_fraction": dict.fromkeys(tflops), "errors": {},
    }  # fmt: skip
    assert "jit-attn % peak" in format_results([record], families)
    gates = {"flash-attn": SimpleNamespace(usable=False), "jit-attn": jit.evaluate()}
    assert failures([record], gates, families) == ["jit-attn fwd seqlen 512 hdim 128"]


def test_the_registry_hands_each_family_with_a_suite_to_the_commands():
    assert gpu_families() == [family.gpu for family in FAMILIES]
    assert [f.package for f in gpu_families()] == ["flash-attn", "flash-attn-3", "flash-attn-4"]


def test_the_standalone_runner_finds_a_family_by_its_package_name():
    assert load("flash-attn") is builtin and load("flash-attn-3") is fa3_gpu
    with pytest.raises(FaforgeError, match="no GPU suite for jit-attn here"):
        load("jit-attn")


def test_options_a_family_declares_itself_are_rejected_naming_where_it_declares():
    code = (
        "import sys; from faforge.gpu.run_suite import main; "
        "sys.exit(main(['--family', 'flash-attn-3', '--declared-archs', '80']))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 2, result.stderr
    assert "declares its GPU code and TUs in its flash_attn_config.py" in result.stderr


def test_a_foreign_machine_skip_reads_the_same_for_packages_and_wheels():
    wheel = not_run_here("wheel", "linux-aarch64", "aarch64")
    package = not_run_here("package", "linux-aarch64", "aarch64", "; CI: gpu-test")
    assert wheel.startswith("a linux-aarch64 wheel's GPU suite runs natively on a GPU runner of that machine (aarch64)")
    assert "(aarch64; CI: gpu-test); this machine is " in package
