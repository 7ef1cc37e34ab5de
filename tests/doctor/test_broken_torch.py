"""A torch that is installed but does not import (the untrusted-input rules): PyPI's real torch 2.4.0 dist-info, whose
CUDA wheels (nvidia-*) are missing, so `import torch` fails on libcudnn. Its fix comes from its
metadata, not from the newest cell; and the import error, which the probed interpreter prints,
reaches the terminal with its escape sequences escaped."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faforge import wheelfetch
from tests.doctor import envs
from tests.support.cache import cache_dir
from tests.support.tiers import slow

TORCH = "2.4.0"
VERSION = "2.8.3.post2"  # flash-attn's (variants/matrix.yaml)
MISSING_CUDA_WHEEL = "libcudnn.so.9: cannot open shared object file: No such file or directory"


@pytest.fixture(scope="module")
@slow("PyPI's torch METADATA by range requests")
def real_metadata() -> str:
    """The METADATA of PyPI's torch 2.4.0 wheel (cp311, manylinux1), read by HTTP range requests."""
    wheel = wheelfetch.pick_wheel(wheelfetch.list_files("torch"), TORCH, "cp311", r"manylinux1_x86_64")
    return wheelfetch.fetch_member(wheel, f"torch-{TORCH}.dist-info/METADATA", cache_dir("torch-metadata")).read_text()


def broken_torch_venv(tmp_path: Path, metadata: str, error: str) -> Path:
    """A venv holding torch's real dist-info, as pip left it, and a torch package that fails to import."""
    python = envs.pyenv_venv(tmp_path / "venv", "3.11")
    site = envs.site_packages(python)
    info = site / f"torch-{TORCH}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata)
    (info / "INSTALLER").write_text("pip\n")
    (site / "torch").mkdir()
    (site / "torch" / "__init__.py").write_text(f"raise OSError({error!r})\n")
    return python


def test_the_fix_for_a_torch_without_its_cuda_wheels_comes_from_its_metadata(run_doctor, real_metadata, tmp_path):
    assert "nvidia-cuda-runtime-cu12 (==12.1.105)" in real_metadata  # the fact the fix is drawn from
    result = run_doctor("--python", broken_torch_venv(tmp_path, real_metadata, MISSING_CUDA_WHEEL))
    assert result.code == 1 and "torch-import-failed" in result.kinds()
    pip = result.fix("pip")
    assert "install a CUDA build" not in pip["title"] and f"torch {TORCH} with the CUDA 12.1 libraries" in pip["title"]
    assert pip["commands"][-1].endswith(f"-m pip install --force-reinstall torch=={TORCH}")
    wheel = result.fix(
        "pip-install"
    )  # then the wheel of that torch's pip cell (its CUDA from the metadata), never a conda line
    assert wheel["cell"] == "pypi/linux-64/py311/torch2.4/cu121/abi0", wheel
    assert wheel["commands"][-1].endswith(f" torch=={TORCH} flash-attn=={VERSION}+torch2.4.cu121.abi0")
    assert not [f for f in result.report["fixes"] if f["kind"].startswith("conda")]


def test_escape_sequences_from_the_probed_interpreter_reach_the_terminal_escaped(real_metadata, tmp_path):
    python = broken_torch_venv(tmp_path, real_metadata, "\x1b[2J\x1b]0;owned\x07" + MISSING_CUDA_WHEEL)
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "doctor", "--python", str(python)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 1, result.stderr
    assert "\x1b" not in result.stdout + result.stderr and "\x07" not in result.stdout
    assert "\\x1b[2J\\x1b]0;owned\\x07" + MISSING_CUDA_WHEEL in result.stdout, result.stdout
