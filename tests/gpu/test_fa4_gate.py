"""FlashAttention-4's GPU gate on this GPU-less machine: it closes with the reason a person needs (no torch, no
CUDA device, an arch FA4 does not run, a package of its import path missing, flash_attn.cute not FA4's own
files) and reads versions from distribution metadata; its stage plugs into test-gpu and bench-gpu."""

from __future__ import annotations

import subprocess
import sys

import pytest

from faforge.families.flash_attn_4 import gpu as fa4_gpu
from faforge.families.flash_attn_4.gpu_gate import FLAVOURS, IMPORT_PATH, Fa4Gate, judge, missing, set_note
from faforge.families.registry import FAMILIES
from faforge.gpu.stage import load

COMPLETE = dict.fromkeys(IMPORT_PATH + FLAVOURS[:1], "1.0")


def found(capability: tuple[int, int], versions: dict) -> dict:
    return {"torch": "2.11.0+cu130", "device": "NVIDIA H100 80GB HBM3", "capability": capability, "versions": versions}


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (7, 5)])
def test_an_arch_outside_fa4s_own_check_closes_the_gate_naming_it(capability):
    gate = judge(found(capability, COMPLETE))
    arch = f"sm_{capability[0]}{capability[1]}"
    assert not gate.usable and f"{arch} is outside what flash-attn-4 runs forward and backward on" in gate.reason
    assert "compute capability 9.x, 10.x, 11.x, 12.x" in gate.reason


def test_a_missing_package_of_the_import_path_closes_the_gate_naming_each():
    versions = {**COMPLETE, "quack-kernels": None, "triton": None, FLAVOURS[0]: None}
    gate = judge(found((9, 0), versions))
    assert not gate.usable
    assert "quack-kernels, triton, nvidia-cutlass-dsl-libs-cu13 or nvidia-cutlass-dsl-libs-cu12 not installed" in (
        gate.reason
    )
    assert "gpu_payload" in gate.reason  # where the GPU machine's payload comes from


def test_one_cuda_flavour_of_the_dsl_is_enough():
    assert missing({**COMPLETE, FLAVOURS[0]: None, FLAVOURS[1]: "4.8.1"}) == []
    assert missing(COMPLETE) == []


def test_whose_files_flash_attn_cute_are_is_read_from_the_distribution_not_from_the_versions_given():
    """Here nothing of FA4 is installed (the main venv): the RECORD check finds no distribution before importing."""
    gate = judge(found((10, 0), COMPLETE))
    assert not gate.usable and gate.reason == "flash-attn-4 is not installed"


def test_the_gate_json_carries_versions_and_first_calls():
    gate = Fa4Gate(False, "why", versions={"flash-attn-4": None})
    gate.first_calls["fwd bf16 hdim128 causal=False"] = 12.5
    data = gate.to_json()
    assert data["versions"] == {"flash-attn-4": None} and data["first_calls"] == {"fwd bf16 hdim128 causal=False": 12.5}


def test_the_stage_is_the_registrys_and_the_standalone_runners():
    assert next(f for f in FAMILIES if f.spec.package == "flash-attn-4").gpu is fa4_gpu
    assert load("flash-attn-4") is fa4_gpu
    assert fa4_gpu.kernel_of("kernel_cutlass_FlashAttentionForwardSm90_object_at_0x7f") == "FlashAttentionForwardSm90"
    assert fa4_gpu.kernel_of("kernel_FlashAttentionBackwardPostprocess_0") == "FlashAttentionBackwardPostprocess"
    assert fa4_gpu.kernel_of("void at::native::vectorized_elementwise_kernel<4>") is None


@pytest.fixture
def torch_stub(monkeypatch):
    """Just enough torch for the benchmark's wrapper (torch.cuda.synchronize): the main venv has none."""
    stub = type(sys)("torch")
    stub.cuda = type("cuda", (), {"synchronize": staticmethod(lambda: None)})
    monkeypatch.setitem(sys.modules, "torch", stub)


def test_first_calls_are_timed_once_per_shape_class(torch_stub):
    class Tensor:
        dtype, shape, requires_grad = "torch.bfloat16", (2, 128, 4, 64), True

    calls = []
    record: dict[str, float] = {}
    timed = fa4_gpu.timed_first_calls(lambda q, k, v, causal: calls.append(causal) or ("out", "lse"), record)
    assert timed(Tensor, Tensor, Tensor, causal=True) == "out"
    assert timed(Tensor, Tensor, Tensor, causal=True) == "out"
    assert calls == [True, True] and list(record) == ["fwd bfloat16 hdim64 causal=True grad=True"]


def test_test_gpu_without_torch_exits_3_with_the_reason():
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "test-gpu", "--family", "flash-attn-4"], capture_output=True, text=True
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "SKIPPED: torch is not importable" in result.stdout


def test_a_usable_gate_says_which_known_good_set_the_run_proves():
    """By the data file's pin policy: exact pins must match, floor pins may be newer (this venv has
    typing-extensions 4.16 against the set's floor of 4.15; nothing of FA4)."""
    note = set_note("2.11.0+cu130", "13.0")
    assert note.startswith("the known-good set torch2.11-cu130, except: flash-attn-4 absent (set: 4.0.0b40), ")
    assert "typing-extensions" not in note
    assert set_note("2.9.1+cu128", "12.8") == "no known-good set of flash-attn-4 for torch 2.9 and CUDA 12.8"


def test_a_shape_fa4_refuses_on_its_first_call_is_na_in_the_benchmark_not_a_crash(torch_stub):
    """bench-gpu takes a RuntimeError as "this implementation cannot take this shape"; FA4 asserts instead."""

    class Tensor:
        dtype, shape, requires_grad = "torch.float16", (2, 128, 4, 512), False

    def refuses(q, k, v, causal):
        raise AssertionError("(head_dim, head_dim_v)=(512, 512) is not supported on SM90")

    with pytest.raises(RuntimeError, match=r"flash-attn-4: AssertionError: \(head_dim, head_dim_v\)=\(512, 512\)"):
        fa4_gpu.timed_first_calls(refuses, {})(Tensor, Tensor, Tensor, causal=False)
