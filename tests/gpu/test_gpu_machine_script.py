"""tests/gpu/run_on_gpu_machine.sh rehearsed here with the network cut (unshare -n): no GPU, so exit 3.

The flash_attn under test comes from a canary folder like tests/gpu/canary/ (xz'd wheel + manifest.json).
Until the real canary is committed, the rehearsal uses a STAND-IN canary: a minimal wheel named like
flash-attn's, with a manifest made by faforge.gpu.canary; it proves the transport (checksum against the
manifest, decompression, installation), not flash-attn. check-abi of the real canary's extension against
torch 2.11.0 is not rehearsed here (the stand-in has no extension).

The rehearsal mirrors the GPU machine as far as this one allows: CPython 3.12 with numpy and pyyaml
(which that machine's image has, and faforge's CLI imports), every other wheel staged by
tests/gpu/stage_gpu_wheels.sh and installed offline. There is no flash_attn wheel and no torch, so
the gate closes at its first check; on the GPU machine the same script runs the suite for real.
"""

from __future__ import annotations

import base64
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faforge.gpu import canary
from tests.support.cache import cache_dir
from tests.support.recipe_test_envs import pip_target
from tests.support.torch_envs import TorchEnvUnavailable, find_python, torch_env

REPO = Path(__file__).resolve().parents[2]
# FlashAttention-4's payload wheels (PyPI), shared with tests/gpu/test_fa4_payload.py
FA4_DOWNLOADS = cache_dir("fa4-gpu-payload") / "cp311-torch2.14"


def rehearsal_site(python: Path) -> Path:
    """numpy + pyyaml for CPython 3.12, installed once under the test cache's pip-target/; needed by this test only."""
    return pip_target(python, "gpu-rehearsal-py3.12", ("numpy", "pyyaml"))


def stand_in_flash_attn_wheel(folder: Path) -> Path:
    """A minimal valid wheel named like flash-attn's (payload for the transport, not a flash-attn)."""
    files = {
        "flash_attn/__init__.py": b'__version__ = "0.0.0"  # rehearsal stand-in\n',
        "flash_attn-0.0.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: flash_attn\nVersion: 0.0.0\n",
        "flash_attn-0.0.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: faforge-test\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for name, data in files.items()
    ]
    files["flash_attn-0.0.0.dist-info/RECORD"] = (
        "\n".join([*record, "flash_attn-0.0.0.dist-info/RECORD,,"]) + "\n"
    ).encode()
    wheel = folder / "flash_attn-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def stand_in_canary(folder: Path, wheel: Path) -> Path:
    """A canary folder holding `wheel` xz'd, with its manifest (the real one: tests/gpu/canary/)."""
    folder.mkdir()
    packed = folder / f"{wheel.name}.xz"
    packed.write_bytes(lzma.compress(wheel.read_bytes()))
    manifest = canary.make_manifest(
        REPO,
        packed,
        build_command="(stand-in for the rehearsal)",
        sdist_sha256="0" * 64,
        torch="none",
        nvcc="none",
        archs="90",
        head_dims=[32, 64],
    )
    (folder / canary.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return folder


def test_the_caps_fit_one_call_under_five_minutes_with_the_timeout_the_docs_give():
    """flash-attn 2's, FA3's and FA4's suites and the benchmark in one device call: their caps leave the installs
    (about 20 s) room under 300 s, and the documented timeout leaves the caps' kill margins room too."""
    script = (REPO / "tests/gpu/run_on_gpu_machine.sh").read_text()
    caps = {name: int(value) for name, value in re.findall(r"^(\w+_CAP_S)=(\d+)$", script, re.MULTILINE)}
    assert set(caps) == {"TEST_CAP_S", "FA3_CAP_S", "FA4_CAP_S", "BENCH_CAP_S"} and sum(caps.values()) <= 290
    assert f"(the caps add up to {sum(caps.values())} s" in script
    docs = (REPO / "docs/maintaining/gpu-gate.md").read_text()
    assert 'carry:   [".gpu-wheels", "build/gpu-payload/part3"]        timeout_s: 330' in docs
    assert 'carry=[".gpu-wheels", "build/gpu-payload/part3"], timeout_s=330' in script


@pytest.mark.slow
def test_rehearsal_without_network_exits_3(tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -n is not permitted here: {probe.stderr.strip()}")
    try:
        python = find_python("3.12")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    wheels, report = tmp_path / "wheels", tmp_path / "report"
    stage = subprocess.run(
        ["bash", str(REPO / "tests/gpu/stage_gpu_wheels.sh"), "--dest", str(wheels)],
        capture_output=True,
        text=True,
    )
    assert stage.returncode == 0, stage.stdout + stage.stderr
    assert not list(wheels.glob("flash_attn*")), "the canary is installed from its folder, not carried twice"
    assert "canary: " in stage.stdout  # the staleness report
    folder = stand_in_canary(tmp_path / "canary", stand_in_flash_attn_wheel(tmp_path))
    env = {
        **os.environ,
        "PYTHON": str(python),
        "PYTHONPATH": str(rehearsal_site(python)),
        "FAFORGE_GPU_WHEELS": str(wheels),
        "FAFORGE_GPU_CANARY": str(folder),
        "FAFORGE_GPU_FA4_PAYLOAD": str(tmp_path / "no-fa4-payload"),
    }
    result = subprocess.run(
        ["unshare", "-n", "bash", str(REPO / "tests/gpu/run_on_gpu_machine.sh"), str(report)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 3, result.stdout[-4000:] + result.stderr[-2000:]
    digest = json.loads((folder / canary.MANIFEST).read_text())["sha256"]
    assert f"canary: flash_attn-0.0.0-py3-none-any.whl.xz sha256 {digest} equal to the manifest's" in result.stdout
    assert "canary: decompressed flash_attn-0.0.0-py3-none-any.whl (" in result.stdout
    assert "flash_attn-0.0.0.dist-info" in next(
        line for line in result.stdout.splitlines() if line.startswith("installed: ")
    )
    assert result.stdout.rstrip().endswith("run_on_gpu_machine.sh: exit 3 (0 passed, 1 failed, 3 not verified)")
    assert sorted(p.name for p in report.iterdir()) == [
        "bench.json",
        "bench.txt",
        "junit.xml",
        "pytest.log",
        "run.log",
        "summary.json",
    ]
    summary = json.loads((report / "summary.json").read_text())
    assert summary["status"] == "skipped" and summary["reason"].startswith("torch is not importable")
    assert json.loads((report / "bench.json").read_text())["status"] == "skipped"


@pytest.mark.slow
def test_rehearsal_installs_the_real_fa3_canary_and_it_passes_the_stable_abi_gate(tmp_path):
    """The same run with a torch on the machine (PyPI's 2.14.1+cu130, CPython 3.11; no GPU): FlashAttention-3's
    committed canary is checked against its manifest, installed offline, and passes the stable-ABI gate
    against that torch's libraries before the GPU suite exits 3."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0
    ):
        pytest.skip("unshare -n is not available here")
    try:
        torch = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    wheels, report = tmp_path / "wheels", tmp_path / "report"
    stage = subprocess.run(
        ["bash", str(REPO / "tests/gpu/stage_gpu_wheels.sh"), "--dest", str(wheels)], capture_output=True, text=True
    )
    assert stage.returncode == 0, stage.stdout + stage.stderr
    folder = stand_in_canary(tmp_path / "canary", stand_in_flash_attn_wheel(tmp_path))
    fa3 = REPO / "tests/gpu/canary/flash-attn-3"
    env = {
        **os.environ,
        "PYTHON": str(torch.python),
        "PYTHONPATH": str(pip_target(torch.python, "gpu-rehearsal-py3.11", ("numpy", "pyyaml"))),
        "FAFORGE_GPU_WHEELS": str(wheels),
        "FAFORGE_GPU_CANARY": str(folder),
        "FAFORGE_GPU_CANARY_FA3": str(fa3),
        "FAFORGE_GPU_FA4_PAYLOAD": str(tmp_path / "no-fa4-payload"),
    }
    result = subprocess.run(
        ["unshare", "-n", "bash", str(REPO / "tests/gpu/run_on_gpu_machine.sh"), str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 3, result.stdout[-4000:] + result.stderr[-2000:]
    manifest = json.loads((fa3 / "manifest.json").read_text())
    assert f"canary: {manifest['file']} sha256 {manifest['sha256']} equal to the manifest's" in result.stdout
    assert "flash_attn_3-3.0.0.dist-info" in next(
        line for line in result.stdout.splitlines() if line.startswith("installed: ")
    )
    assert "OK: stable ABI, loads on every torch checked (2.14.1+cu130)" in result.stdout, result.stdout[-3000:]
    assert result.stdout.index("OK: stable ABI") < result.stdout.index("== faforge test-gpu")
    # then FA3's own suite: its gate reads the canary's declaration and, with no GPU here, nothing is verified
    fa3_summary = json.loads((report / "fa3" / "summary.json").read_text())
    assert fa3_summary["family"] == "flash-attn-3" and fa3_summary["exit_code"] == 3, fa3_summary["reason"]
    assert "== exit codes: test-gpu 3, test-gpu flash-attn-3 3, test-gpu flash-attn-4 3, bench-gpu" in result.stdout


@pytest.mark.slow
def test_rehearsal_installs_the_fa4_payload_from_its_parts_over_flash_attn_2(tmp_path):
    """FlashAttention-4's part of the same run (torch 2.14.1+cu130, CPython 3.11; no GPU): its payload, built from
    real PyPI wheels and carried as parts, is checked, put back together, installed offline and copied over the
    flash-attn 2 install as pip would; FA4's suite then sees flash-attn-4 4.0.0b40 by its metadata and, with no
    GPU here, verifies nothing (3), and the benchmark's JSON carries FA4's gate."""
    if (
        shutil.which("unshare") is None
        or subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0
    ):
        pytest.skip("unshare -n is not available here")
    try:
        torch = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    wheels, report, payload = tmp_path / "wheels", tmp_path / "report", tmp_path / "gpu-payload"
    stage = subprocess.run(
        ["bash", str(REPO / "tests/gpu/stage_gpu_wheels.sh"), "--dest", str(wheels)], capture_output=True, text=True
    )
    assert stage.returncode == 0, stage.stdout + stage.stderr
    built = subprocess.run(
        [sys.executable, "-m", "faforge.families.flash_attn_4.gpu_payload", "build", "--torch", "2.14", "--python",
         "3.11", "--image-has", "triton,typing-extensions", "--downloads", str(FA4_DOWNLOADS), "--out", str(payload)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    env = {
        **os.environ,
        "PYTHON": str(torch.python),
        "PYTHONPATH": str(pip_target(torch.python, "gpu-rehearsal-py3.11", ("numpy", "pyyaml"))),
        "FAFORGE_GPU_WHEELS": str(wheels),
        "FAFORGE_GPU_CANARY": str(stand_in_canary(tmp_path / "canary", stand_in_flash_attn_wheel(tmp_path))),
        "FAFORGE_GPU_FA4_PAYLOAD": str(payload),
    }
    result = subprocess.run(
        ["unshare", "-n", "bash", str(REPO / "tests/gpu/run_on_gpu_machine.sh"), str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 3, result.stdout[-4000:] + result.stderr[-2000:]
    assert "installed: flash-attn-4 flash_attn_4-4.0.0b40.dist-info nvidia_cutlass_dsl-4.8.1.dist-info" in result.stdout
    fa4 = json.loads((report / "fa4" / "summary.json").read_text())
    assert fa4["family"] == "flash-attn-4" and fa4["exit_code"] == 3
    assert fa4["reason"].startswith("no CUDA device visible to torch 2.14.1"), fa4["reason"]
    assert fa4["gate"]["versions"]["flash-attn-4"] == "4.0.0b40"
    assert "== exit codes: test-gpu 3, test-gpu flash-attn-3 0, test-gpu flash-attn-4 3, bench-gpu 3" in result.stdout
    assert json.loads((report / "bench.json").read_text())["fa4_gate"]["versions"]["quack-kernels"] == "0.6.5"
