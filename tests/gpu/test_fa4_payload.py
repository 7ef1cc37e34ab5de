"""The GPU machine's FA4 payload, end to end on this machine with real PyPI wheels: `gpu_payload build` downloads
the known-good set of torch 2.14 x CUDA 13.0 for this Python (cp311; the GPU machine's is cp312), checks every
sha256 and cuts it into parts; from the parts alone (copied as device calls carry them), `gpu_payload install`
checks them, installs with pip --no-index --no-deps into an empty folder and prints the PYTHONPATH that makes it
a site folder; the real torch 2.14.1 (CUDA 13.0, no GPU here) then imports flash_attn.cute, and FA4's GPU gate,
given a Hopper, opens, and names flash-attn 2's copy of flash_attn/cute when that overwrote FA4's."""

from __future__ import annotations

import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faforge import paths
from faforge.family import FLASH_ATTN_4
from tests.support.cache import cache_dir
from tests.support.recipe_test_envs import pip_target
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

pytestmark = pytest.mark.slow

REPO = paths.repo_root()
SCRIPTS = REPO / "scripts"
PART_MIB = 30  # smaller than the device's parts, so that this payload too comes in several parts
# The torch env has torch, triton and typing-extensions; einops and packaging come with the payload here.
IMAGE_HAS = "triton,typing-extensions"
FA2_CANARY = REPO / "tests" / "gpu" / "canary" / "flash_attn-2.8.3.post2-cp312-cp312-linux_x86_64.whl.xz"
GATE = """
import json
from faforge.families.flash_attn_4.gpu_gate import installed_versions, judge, set_note
gate = judge({"torch": "2.14.1", "device": "NVIDIA H100", "capability": (9, 0), "versions": installed_versions()})
print(json.dumps({**gate.to_json(), "set": set_note("2.14.1+cu130", "13.0")}))
"""


def payload_cli(*args: str, python: str = sys.executable, env: dict | None = None) -> subprocess.CompletedProcess:
    command = [python, "-m", "faforge.families.flash_attn_4.gpu_payload", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)


@pytest.fixture(scope="module")
def torch_python() -> Path:
    try:
        return torch_env("2.14.1").python
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def payload(tmp_path_factory) -> Path:
    """The parts, built from real PyPI wheels (kept in the test cache between runs)."""
    out = tmp_path_factory.mktemp("here") / "gpu-payload"
    downloads = cache_dir("fa4-gpu-payload") / "cp311-torch2.14"
    result = payload_cli(
        "build", "--torch", "2.14", "--python", "3.11", "--image-has", IMAGE_HAS, "--part-mib", str(PART_MIB),
        "--downloads", str(downloads), "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    print(result.stdout)
    return out


def carried(payload: Path, tmp_path: Path, parts: list[str]) -> Path:
    there = tmp_path / "there" / "gpu-payload"
    there.mkdir(parents=True)
    for name in parts:
        shutil.copytree(payload / name, there / name)
    return there


def test_the_payload_is_the_set_in_parts_under_the_limit(payload):
    manifest = json.loads((payload / "part1" / "manifest.json").read_text())
    names = sorted(w["file"].split("-")[0] for w in manifest["wheels"])
    assert "nvidia_cutlass_dsl_libs_cu13" in names and "flash_attn_4" in names and "einops" in names
    assert "nvidia_cutlass_dsl_libs_cu12" not in names and "triton" not in names
    assert len(manifest["parts"]) == 4 and all(p["size"] <= PART_MIB << 20 for p in manifest["parts"])
    assert manifest["set"] == "torch2.14-cu130" and manifest["python"] == "3.11"


def test_installed_from_the_parts_alone_flash_attn_cute_imports_beside_real_torch(payload, torch_python, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(SCRIPTS))
    there = carried(payload, tmp_path, sorted(p.name for p in payload.iterdir()))
    clean = subprocess.run([str(torch_python), "-c", f"import {FLASH_ATTN_4.module}"], capture_output=True, text=True)
    assert clean.returncode != 0  # the torch env itself holds nothing of FA4
    target = tmp_path / "site"
    result = payload_cli("install", "--from", str(there), "--target", str(target), "--python", str(torch_python))
    assert result.returncode == 0, result.stderr
    pythonpath = result.stdout.strip().splitlines()[-1]
    assert pythonpath == f"{target}:{target}/nvidia_cutlass_dsl/dsl_packages"
    image = pip_target(torch_python, "gpu-rehearsal-py3.11", ("numpy", "pyyaml"))  # as the GPU machine's image has
    env = dict(os.environ, PYTHONPATH=f"{SCRIPTS}:{pythonpath}:{image}")
    code = f"import importlib.metadata as m, {FLASH_ATTN_4.module} as fa; print(fa.__file__, m.version('flash-attn-4'))"
    imported = subprocess.run([str(torch_python), "-c", code], capture_output=True, text=True, env=env)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert imported.stdout.split()[-2:] == [f"{target}/flash_attn/cute/__init__.py", "4.0.0b40"]

    opened = subprocess.run([str(torch_python), "-c", GATE], capture_output=True, text=True, env=env)
    gate = json.loads(opened.stdout.splitlines()[-1])
    assert gate["usable"], gate["reason"]
    assert gate["versions"]["nvidia-cutlass-dsl-libs-cu13"] == "4.8.1" and gate["versions"]["triton"] == "3.8.0"
    # the payload's own cuda-bindings shadows the torch env's 13.5.0; only the CUDA 12 flavour was left out
    assert gate["set"] == "the known-good set torch2.14-cu130, except: nvidia-cutlass-dsl-libs-cu12 absent (set: 4.8.1)"

    with zipfile.ZipFile(io.BytesIO(lzma.decompress(FA2_CANARY.read_bytes()))) as fa2:
        (target / "flash_attn" / "cute" / "interface.py").write_bytes(fa2.read("flash_attn/cute/interface.py"))
    shadowed = subprocess.run([str(torch_python), "-c", GATE], capture_output=True, text=True, env=env)
    gate = json.loads(shadowed.stdout.splitlines()[-1])
    assert not gate["usable"] and "which is not flash-attn-4's file" in gate["reason"], gate["reason"]


def test_a_missing_part_is_refused_by_name_before_installing(payload, tmp_path):
    there = carried(payload, tmp_path, ["part1", "part3", "part4"])
    result = payload_cli("install", "--from", str(there), "--target", str(tmp_path / "site"))
    assert result.returncode == 2 and "part part2 of the payload is missing" in result.stderr
    assert not (tmp_path / "site").exists()


def test_a_corrupt_part_is_refused_by_name_before_installing(payload, tmp_path):
    there = carried(payload, tmp_path, ["part1", "part2", "part3", "part4"])
    with open(there / "part2" / "part2.bin", "r+b") as part:
        part.seek(1 << 20)
        byte = part.read(1)
        part.seek(1 << 20)
        part.write(bytes([byte[0] ^ 0xFF]))
    result = payload_cli("install", "--from", str(there), "--target", str(tmp_path / "site"))
    assert result.returncode == 2 and "part part2 of the payload is corrupt" in result.stderr
    assert not (tmp_path / "site").exists()
