"""The README's Quickstart from a fresh clone: `scripts/dev faforge` installs only what the CLI needs and
shows pip's progress on stderr (stdout stays the command's), `scripts/dev test` adds the test tools."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.fresh_clone import fresh_clone

TEST_ONLY_MODULES = ("hypothesis", "check_jsonschema")  # pyproject.toml's `test` extra


def importable(python: Path, module: str) -> bool:
    return subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


@pytest.mark.slow
def test_first_run_installs_the_cli_with_progress_then_test_adds_the_test_tools(tmp_path):
    clone = fresh_clone(tmp_path / "faforge")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    main = subprocess.run(
        ["scripts/dev", "faforge", "matrix", "--platform", "linux-64", "--json"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert main.returncode == 0, main.stderr
    assert json.loads(main.stdout)  # pip's output did not land in the command's stdout
    assert "+ pip install -e '.'" in main.stderr
    assert "Successfully installed" in main.stderr and "faforge" in main.stderr  # pip's progress, not 30 silent seconds
    python = clone / ".venv" / "bin" / "python"
    assert [m for m in TEST_ONLY_MODULES if importable(python, m)] == []
    again = subprocess.run(
        ["scripts/dev", "faforge", "--version"], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and "pip install" not in again.stderr  # installed once

    tests = subprocess.run(
        ["scripts/dev", "test", "--collect-only", "-q", "tests/test_wheelfetch.py"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "+ pip install -e '.[test]'" in tests.stderr
    assert [m for m in TEST_ONLY_MODULES if not importable(python, m)] == []
