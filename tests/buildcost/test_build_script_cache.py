"""build_flash_attn.py's compiler-cache setting as a command sees it (the helpers are tested in
tests/backend/test_ccache.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from faforge import paths


def test_unknown_compiler_cache_from_the_environment_is_a_usage_error(tmp_path):
    build = paths.recipe_dir() / "build_flash_attn.py"
    env = {**os.environ, "FAFORGE_COMPILER_CACHE": "sccache"}
    result = subprocess.run(
        [sys.executable, str(build), "--archs", "80", "--cxx11-abi", "1", "--source-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2
    assert "FAFORGE_COMPILER_CACHE='sccache'" in result.stderr
