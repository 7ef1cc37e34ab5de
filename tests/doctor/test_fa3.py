"""`faforge doctor` on FlashAttention-3, the second family: the committed real canary installed beside a real torch.

Environments: a fresh venv whose site-packages reaches PyPI's torch (2.14.1+cu130, or 2.13.0's CPU build)
through a .pth file, as verify's clean environments do, and the canary wheel installed with pip --target.
No GPU here: the GPU-code check has nothing to compare against, and says so.
"""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.family import FLASH_ATTN_3
from tests.gpu.fa3_canary import FOLDER
from tests.support.torch_envs import TorchEnvUnavailable, find_python, torch_env

pytestmark = pytest.mark.slow
MANIFEST = json.loads((FOLDER / "manifest.json").read_text())


def fa3_env(root: Path, torch_version: str) -> Path:
    """A venv with torch `torch_version` (by .pth) and the FA3 canary; returns its python."""
    try:
        torch = torch_env(torch_version)
        base = find_python("3.11")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    subprocess.run([str(base), "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    wheel = root / MANIFEST["file"].removesuffix(".xz")
    wheel.write_bytes(lzma.decompress((FOLDER / MANIFEST["file"]).read_bytes()))
    subprocess.run(
        [
            str(torch.python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(root / "fa3"),
            str(wheel),
        ],
        check=True,
    )
    site = next((root / "venv/lib").glob("python3*/site-packages"))
    (site / "faforge-test.pth").write_text(f"{root / 'fa3'}\n{torch.site_packages}\n")
    return root / "venv/bin/python"


def doctor(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", "doctor", "--python", str(python), *args],
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_canary_beside_torch_2_14_is_healthy_and_its_claim_read_from_the_binary(tmp_path):
    python = fa3_env(tmp_path, "2.14.1")
    run = doctor(python, "--json")
    report = json.loads(run.stdout)
    fa3 = report["flash_attn_3"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]  # flash-attn (2) absent is no problem here
    assert fa3["healthy"] and fa3["torch"] == "2.14.1+cu130" and fa3["stable_functions"] == 49, fa3
    assert fa3["gpu"] == {"sass": ["sm_90a"], "ptx": []} and [p["kind"] for p in fa3["problems"]] == ["no-gpu"]
    text = doctor(python).stdout
    assert (
        f"{FLASH_ATTN_3.package}: " in text
        and "works with torch >= 2.9: imports only torch's stable C functions (49)" in text
    )


def test_beside_a_cpu_torch_it_says_the_binary_cannot_load(tmp_path):
    """PyPI's torch 2.13.0 CPU build has no libtorch_cuda.so, which FA3 needs: the import and the load both fail."""
    python = fa3_env(tmp_path, "2.13.0")
    run = doctor(python, "--json")
    fa3 = json.loads(run.stdout)["flash_attn_3"]
    assert run.returncode == 1 and not fa3["healthy"]
    kinds = {p["kind"] for p in fa3["problems"]}
    assert {"stable-abi-load", "import-failed"} <= kinds, fa3["problems"]
    assert any("libtorch_cuda.so" in p["message"] for p in fa3["problems"]), fa3["problems"]


def test_a_package_without_its_extension_is_an_incomplete_install(tmp_path):
    python = fa3_env(tmp_path, "2.14.1")
    (tmp_path / "fa3" / FLASH_ATTN_3.module / "_C.abi3.so").unlink()
    run = doctor(python, "--json")
    fa3 = json.loads(run.stdout)["flash_attn_3"]
    assert run.returncode == 1 and [p["kind"] for p in fa3["problems"]] == ["extension-missing"], fa3
