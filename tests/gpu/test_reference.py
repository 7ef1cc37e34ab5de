"""The suite's fp32 reference agrees with independent implementations (tests/gpu/reference_checks.py), on the CPU."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.torch_envs import TorchEnvUnavailable, torch_env

HERE = Path(__file__).resolve().parent


@pytest.mark.slow  # a torch venv
def test_reference_matches_naive_loops_sdpa_and_complex_rotation():
    try:
        env = torch_env("2.14.1")  # this repo venv has no torch; the shared cached venv does
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    result = subprocess.run(
        [str(env.python), "-W", "ignore::UserWarning", str(HERE / "reference_checks.py")],
        env={"PYTHONPATH": f"{HERE.parents[1] / 'scripts'}"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("ok  ") == 19, result.stdout
