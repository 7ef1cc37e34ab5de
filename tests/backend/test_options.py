"""The build script's environment variables as hostile input (the untrusted-input rules): the real script, run as the
recipe runs it, refuses each bad value with exit 2 naming the variable, never a traceback, before any
work; an empty value is unset. test_hostile_classes.py counts these variables as covered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.backend import options

SCRIPT = Path(__file__).resolve().parents[2] / "recipes" / "flash-attn" / "build_flash_attn.py"
HUGE = "9" * 100_000
COUNT_VALUES = ["x", "0", "-1", "1.5", "4097", "99999999999999999999999", " ", "\x1b[2J", HUGE]
# Every variable the build script reads, with values each must refuse.
HOSTILE = {
    "MAX_JOBS": COUNT_VALUES,
    "NVCC_THREADS": COUNT_VALUES,
    "FAFORGE_CXX11_ABI": ["2", "yes", " 1", "\x1b[2J", HUGE],
    "FAFORGE_PHILOX_OFFSET_BITS": ["48", "x", "-64", "64 ", "\x1b[2J", HUGE],
    "FAFORGE_COMPILER_CACHE": ["sccache", "CCACHE", ",", "\x1b[2J", HUGE],
}
# Free text, checked where it is used: a path that holds no faforge/backend, TU names not in the sdist.
CHECKED_IN_USE = {
    "FAFORGE_CHECKER_PATH": "/nonexistent",
    "FAFORGE_BUILD_TUS": "no_such_tu.cu",
    "FLASH_ATTN_CUDA_ARCHS": "80;ampere",
}


def run_script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {*HOSTILE, *CHECKED_IN_USE}}
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--kernels-only", "--plan-only", "--archs", "80", *args],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=60,
    )


@pytest.mark.parametrize(
    "name,value", [(n, v) for n, values in HOSTILE.items() for v in values], ids=lambda x: ascii(x[:12])
)
def test_a_bad_value_is_refused_naming_the_variable(name, value, tmp_path):
    result = run_script({name: value}, "--source-dir", str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert f"${name}=" in result.stderr and "Traceback" not in result.stderr
    assert "\x1b" not in result.stderr and len(result.stderr) < 500


@pytest.mark.parametrize("name,value", CHECKED_IN_USE.items())
def test_free_text_is_refused_where_it_is_used(name, value, tmp_path):
    sdist = tmp_path / "sdist"
    (sdist / "csrc/flash_attn/src").mkdir(parents=True)
    (sdist / "csrc/flash_attn/src/flash_fwd_hdim64_fp16_sm80.cu").write_text("")
    (sdist / "PKG-INFO").write_text("Version: 2.8.3\n")
    args = (
        ("--source-dir", str(sdist))
        if name != "FLASH_ATTN_CUDA_ARCHS"
        else ("--source-dir", str(sdist), "--archs", value)
    )
    result = run_script({name: value}, *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize("name", HOSTILE)
def test_an_empty_value_is_unset(name):
    assert options.from_env(name, options.positive_int, "the default", {name: ""}) == "the default"


def test_every_variable_the_script_reads_is_here():
    """The names the build script's options read are exactly this module's (a new one needs its cases)."""
    read = {name for name in options.ENV_OPTIONS}
    assert read == {*HOSTILE, *CHECKED_IN_USE}
