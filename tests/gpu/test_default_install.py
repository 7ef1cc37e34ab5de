"""faforge from a plain `pip install .` (default dependencies only, no [test] extra): every subcommand starts,
test-gpu and bench-gpu say "not verified" (3) on this GPU-less machine instead of failing (1).

The venv with the default dependencies is built once in the test cache (keyed by the dependency list);
faforge itself is installed from this checkout into a fresh --target folder per run, console script included.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from faforge.commands import COMMANDS
from tests.support.cache import cache_dir

REPO = Path(__file__).resolve().parents[2]


def default_dependencies() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def default_deps_python() -> Path:
    deps = default_dependencies()
    key = hashlib.sha256(json.dumps([sys.version, deps]).encode()).hexdigest()[:12]
    prefix = cache_dir("venvs") / f"faforge-default-deps-{key}"
    python = prefix / "bin" / "python"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{prefix}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (prefix / ".faforge-complete").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(prefix)], check=True)
            result = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *deps], capture_output=True, text=True
            )
            if result.returncode != 0:
                pytest.skip(f"cannot install faforge's default dependencies: {result.stderr.strip().splitlines()[-1:]}")
            (prefix / ".faforge-complete").write_text("\n".join(deps) + "\n")
    return python


@pytest.fixture(scope="module")
def plain_install(tmp_path_factory) -> tuple[Path, dict]:
    """(the faforge console script, its environment) after `pip install .` with default dependencies only."""
    python = default_deps_python()
    site = tmp_path_factory.mktemp("plain-install")
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PYTHONPATH": str(site)}
    return site / "bin" / "faforge", env


@pytest.mark.slow
def test_test_gpu_after_a_plain_install_exits_3_with_the_reason(plain_install, tmp_path):
    faforge, env = plain_install
    result = subprocess.run(
        [str(faforge), "test-gpu", "--report-dir", str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert result.returncode == 3, result.stdout[-3000:] + result.stderr[-2000:]
    assert "SKIPPED: torch is not importable" in result.stdout, result.stdout[-2000:]
    assert json.loads((tmp_path / "summary.json").read_text())["counts"]["skipped"] > 0


@pytest.mark.slow
def test_bench_gpu_after_a_plain_install_exits_3(plain_install, tmp_path):
    faforge, env = plain_install
    result = subprocess.run([str(faforge), "bench-gpu"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 3 and result.stderr.startswith("SKIPPED: torch is not importable"), result.stderr[
        -2000:
    ]


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_starts_after_a_plain_install(plain_install, tmp_path, command):
    faforge, env = plain_install
    result = subprocess.run([str(faforge), command, "--help"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"usage: faforge {command}")
