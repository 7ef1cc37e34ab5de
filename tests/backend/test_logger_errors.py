"""faforge.backend.logger and .errors: the prefix that marks the build's lines in rattler-build's log, and
the one error the entry script prints without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from faforge.backend import logger
from faforge.backend.errors import BuildError

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "flash-attn" / "build_flash_attn.py"


def test_a_progress_line_carries_the_build_scripts_name(capsys):
    logger.log("compiling")
    assert capsys.readouterr().out == "[build_flash_attn] compiling\n"


def test_a_build_error_is_one_line_exit_2(tmp_path):
    assert issubclass(BuildError, Exception)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--kernels-only", "--archs", "80", "--source-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        done.returncode == 2 and done.stderr.startswith("build_flash_attn: error: ") and "Traceback" not in done.stderr
    )
