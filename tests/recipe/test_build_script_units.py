"""recipes/flash-attn/build_flash_attn.py run as a command: its usage and one-line errors (the backend's
units are tested in tests/backend/)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from faforge import paths

SCRIPT = paths.recipe_dir() / "build_flash_attn.py"


def test_missing_arch_list_and_abi_are_usage_errors():
    env = {"PATH": "/usr/bin:/bin"}
    no_archs = subprocess.run(
        [sys.executable, str(SCRIPT), "--cxx11-abi", "1"], capture_output=True, text=True, env=env
    )
    assert no_archs.returncode == 2 and "no arch list" in no_archs.stderr and "Traceback" not in no_archs.stderr
    no_abi = subprocess.run([sys.executable, str(SCRIPT), "--archs", "90"], capture_output=True, text=True, env=env)
    assert no_abi.returncode == 2 and "no C++ ABI" in no_abi.stderr


def test_missing_source_and_missing_torch_are_one_line_errors(tmp_path):
    """The README's outside-conda build line, run before the sdist is unpacked or in a Python without torch."""
    env = {"PATH": "/usr/bin:/bin", "FLASH_ATTN_CUDA_ARCHS": "80;90"}
    common = ["--cxx11-abi", "1", "--build-dir", str(tmp_path / "build"), "--wheel-dir", str(tmp_path / "dist")]
    missing = subprocess.run(
        [sys.executable, str(SCRIPT), "--source-dir", str(tmp_path / "flash_attn-2.8.3.post2"), *common],
        capture_output=True,
        text=True,
        env=env,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert (
        f"--source-dir {tmp_path / 'flash_attn-2.8.3.post2'}: no such folder; unpack the flash-attn sdist"
        in missing.stderr
    )
    if subprocess.run([sys.executable, "-I", "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip(f"{sys.executable} has a torch; this case wants a Python without one")
    (tmp_path / "src").mkdir()
    no_torch = subprocess.run(
        [sys.executable, "-I", str(SCRIPT), "--source-dir", str(tmp_path / "src"), *common],
        capture_output=True,
        text=True,
        env=env,
    )
    assert no_torch.returncode == 2 and "Traceback" not in no_torch.stderr
    assert f"torch does not import in {sys.executable}" in no_torch.stderr
