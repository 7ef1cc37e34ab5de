"""Other builds of flash-attn 2's extension (variants/flash-attn-builds.yaml): doctor finds and diagnoses them.

Real parts: PyPI's vllm-flash-attn 2.5.8.post2 (cp311; built for torch 2.3.0 and CUDA 12.1, its METADATA
says `torch ==2.3.0`): its extension `vllm_flash_attn_2_cuda` (125 MB, one member of a 37 MB wheel, read by HTTP
range requests), its package and its .dist-info, laid out as pip installs them beside the cached real torch
2.14.1 (CUDA 13.0). The CUDA 12 runtime it links is PyPI's nvidia-cuda-runtime-cu12 12.1.105 (torch 2.3.0's
pin), on LD_LIBRARY_PATH, so the real loader gets as far as the symbols: `undefined symbol`, as users report.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from faforge.doctor.other_builds import load_builds
from faforge.wheelfetch import RemoteZip, fetch_member
from tests.doctor import envs
from tests.support.cache import cache_dir
from tests.support.pinned_wheels import listed

pytestmark = pytest.mark.slow

VLLM = (
    "vllm-flash-attn",
    "vllm_flash_attn-2.5.8.post2-cp311-cp311-manylinux1_x86_64.whl",
    "fbc424eb068e1b458c2d44171b159b0c0e3c5560106a32b00410b305736ff034",
)
VLLM_FILES = (
    "vllm_flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so",
    "vllm_flash_attn/__init__.py",
    "vllm_flash_attn/flash_attn_interface.py",
    *(f"vllm_flash_attn-2.5.8.post2.dist-info/{name}" for name in ("METADATA", "WHEEL", "top_level.txt", "RECORD")),
)
CUDART = (
    "nvidia-cuda-runtime-cu12",
    "nvidia_cuda_runtime_cu12-12.1.105-py3-none-manylinux1_x86_64.whl",
    "6e258468ddf5796e25f1dc591a31029fa317d97a0a94ed93468fc86301d61e40",
)
MEMBERS = cache_dir("wheel-members")


def real_members(pinned: tuple[str, str, str], names) -> dict[str, Path]:
    wheel = listed(*pinned)
    return {name: fetch_member(wheel, name, MEMBERS) for name in names}


def test_the_data_names_what_the_real_wheels_hold():
    """Each row's names are the real wheel's: its extension at the top level, its package, its .dist-info."""
    build = next(b for b in load_builds() if b.distribution == "vllm-flash-attn")
    wheel = listed(*VLLM)
    members = RemoteZip(wheel.url, wheel.size).members
    assert any(n.startswith(f"{build.extension}.cpython-311") and n.endswith(".so") and "/" not in n for n in members)
    assert f"{build.module}/__init__.py" in members
    assert any(
        n.startswith(build.distribution.replace("-", "_") + "-") and n.endswith(".dist-info/METADATA") for n in members
    )


def test_vllm_flash_attn_beside_a_torch_it_was_not_built_for(run_doctor, cuda_overlay, tmp_path):
    site = envs.site_packages(cuda_overlay)
    for name, path in real_members(VLLM, VLLM_FILES).items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, site / name)
    (site / "vllm_flash_attn-2.5.8.post2.dist-info" / "INSTALLER").write_text("pip\n")
    cudart = real_members(CUDART, ["nvidia/cuda_runtime/lib/libcudart.so.12"])[
        "nvidia/cuda_runtime/lib/libcudart.so.12"
    ].parent
    result = run_doctor("--python", cuda_overlay, "--offline", env={"LD_LIBRARY_PATH": str(cudart)})
    assert result.code == 1, result.stderr
    others = result.report["other_builds"]
    assert [o["distribution"] for o in others] == ["vllm-flash-attn"]
    vllm = others[0]
    assert vllm["version"] == "2.5.8.post2" and vllm["healthy"] is False
    assert vllm["extension"].endswith("/vllm_flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so")
    errors = [p for p in vllm["problems"] if p["severity"] == "error"]
    said = " ".join(p["message"] + " " + " ".join(p["details"]) for p in errors)
    assert "undefined symbol" in said, errors
    assert "vllm-flash-attn" in said and "flash-attn " not in said.replace("vllm-flash-attn ", "")
    assert "flash-attn-missing" not in result.kinds(), "vllm-flash-attn is flash-attn 2's extension: nothing is missing"
    text = run_doctor("--python", cuda_overlay, "--offline", json_output=False, env={"LD_LIBRARY_PATH": str(cudart)})
    assert "vllm-flash-attn 2.5.8.post2" in text.stdout and "vllm-flash-attn: problems found" in text.stdout
