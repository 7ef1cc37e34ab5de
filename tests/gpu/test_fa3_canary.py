"""FlashAttention-3's committed GPU canary (tests/gpu/canary/flash-attn-3/), on the real
binary: it matches its manifest, pip installs it offline, it declares what it contains, it passes the
stable-ABI gate (ours and torch-abi-audit's), and it imports beside PyPI's torch 2.14.1+cu130, its ops
registered, on this GPU-less machine."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.abi import elf
from faforge.abi.fatbin import GpuArchs, read_gpu_archs
from faforge.family import FLASH_ATTN_3
from faforge.packagefile import sha256_of
from tests.gpu.fa3_canary import FOLDER, declared
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

pytestmark = pytest.mark.slow
MANIFEST = json.loads((FOLDER / "manifest.json").read_text())


def test_the_committed_canary_matches_its_manifest():
    packed = FOLDER / MANIFEST["file"]
    assert sha256_of(packed) == MANIFEST["sha256"] and packed.stat().st_size == MANIFEST["size"] <= 20 * 1024 * 1024


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    try:
        torch = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("fa3-canary")
    wheel = root / MANIFEST["file"].removesuffix(".xz")
    wheel.write_bytes(lzma.decompress((FOLDER / MANIFEST["file"]).read_bytes()))
    pip = subprocess.run(
        [
            str(torch.python),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(root / "site"),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-2000:]
    return root / "site", torch


def test_it_declares_exactly_what_it_contains(installed):
    site, _ = installed
    config = declared(site)
    assert {k: config[k] for k in ("gpu_archs", "tus", "build_flags", "torch_target_version")} == MANIFEST["declares"]
    assert config["tus"] == [
        "flash_api_stable.cpp",
        "instantiations/flash_fwd_hdim128_bf16_sm90.cu",
        "instantiations/flash_fwd_hdim128_fp16_sm90.cu",
        "instantiations/flash_bwd_hdim128_bf16_sm90.cu",
        "instantiations/flash_bwd_hdim128_fp16_sm90.cu",
        "flash_prepare_scheduler.cu",
    ]
    assert read_gpu_archs(site / FLASH_ATTN_3.module / "_C.abi3.so") == GpuArchs(sass=("sm_90a",), ptx=())
    # torch's libraries and the CUDA runtime are found without `import torch` first, in conda and pip layouts
    assert elf.read_info(site / FLASH_ATTN_3.module / "_C.abi3.so").runpath == (
        "$ORIGIN/../../..",
        "$ORIGIN/../torch/lib",
    )


def test_it_passes_the_stable_abi_gate_and_the_independent_audit_agrees(installed):
    site, torch = installed
    extension = site / FLASH_ATTN_3.module / "_C.abi3.so"
    ours = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "check-abi",
            str(extension),
            "--stable-abi",
            "--against",
            str(torch.torch_lib),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ours.returncode == 0, ours.stdout[-2000:]
    report = json.loads(ours.stdout)
    assert report["unstable_imports"] == [] and "aoti_torch_get_current_cuda_stream" in report["stable_imports"]
    audit = Path(sys.executable).parent / "torch-abi-audit"
    if not audit.is_file():
        pytest.skip("torch-abi-audit (the test extra) is not installed in this environment")
    theirs = json.loads(
        subprocess.run([str(audit), "--json", str(extension)], capture_output=True, text=True, check=True).stdout
    )
    assert [lib["torch"]["stable"] for lib in theirs["extensions"] if lib["torch"]["uses_torch"]] == [True]


def test_it_imports_beside_torch_with_its_ops_registered(installed):
    site, torch = installed
    probe = (
        f"import torch, {FLASH_ATTN_3.module}, {FLASH_ATTN_3.interface_module}, {FLASH_ATTN_3.extension}\n"
        f"print({FLASH_ATTN_3.module}.__version__, sorted(n for n in dir(torch.ops.{FLASH_ATTN_3.module}) if "
        "n.startswith('_flash')))"
    )
    run = subprocess.run(
        [str(torch.python), "-W", "ignore", "-c", probe],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[0] == "3.0.0 ['_flash_attn_backward', '_flash_attn_forward']"
