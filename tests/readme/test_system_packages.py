"""`scripts/dev test` asks before it changes the machine: a missing system package is listed with the tests
that will skip, and apt-get runs only under CI (CI=true) or with --install-system-packages."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

MISSING = "faforge-no-such-package faforge-no-such-binary the imaginary tests (tests/nowhere.py)\n"


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """scripts/dev beside this checkout's .venv, and a system-packages.txt naming one binary no machine has.

    Its pyproject.toml is the one the .venv was installed from (scripts/dev's stamp), so scripts/dev never
    reinstalls: a reinstall from here would point the shared .venv's faforge at this scratch folder."""
    stamp = REPO / ".venv/.installed-pyproject-test"
    if not (REPO / ".venv/bin/python").exists() or not stamp.is_file():
        pytest.skip("needs this checkout's .venv with the test tools (scripts/dev test makes it)")
    (tmp_path / "scripts").mkdir()
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "scripts/dev", tmp_path / "scripts/dev")
    shutil.copy(stamp, tmp_path / "pyproject.toml")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "tests/system-packages.txt").write_text((REPO / "tests/system-packages.txt").read_text() + MISSING)
    return tmp_path


def dev_test(checkout: Path, *args: str, ci: str | None = None) -> tuple[subprocess.CompletedProcess, str]:
    """Run `scripts/dev test ARGS --version` with an apt-get on PATH that only records how it was called."""
    bin_dir = checkout / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    log = checkout / "apt-get.log"
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "apt-get").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    if ci is not None:
        env["CI"] = ci
    result = subprocess.run(
        [str(checkout / "scripts/dev"), "test", *args, "--version"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, log.read_text() if log.exists() else ""


def test_without_ci_or_the_flag_it_lists_what_is_missing_and_which_tests_skip_and_goes_on(checkout):
    result, apt = dev_test(checkout)
    assert result.returncode == 0, result.stderr
    assert "pip install" not in result.stderr
    assert apt == ""
    assert "faforge-no-such-package (faforge-no-such-binary): the imaginary tests (tests/nowhere.py)" in result.stderr
    assert "--install-system-packages" in result.stderr


def test_the_flag_installs_and_is_not_passed_to_pytest(checkout):
    result, apt = dev_test(checkout, "--install-system-packages")
    assert result.returncode == 0, result.stderr
    if os.geteuid() != 0:
        assert "needs root" in result.stderr
        return
    assert "install -y -qq faforge-no-such-package" in apt


def test_ci_installs_without_the_flag(checkout):
    result, apt = dev_test(checkout, ci="true")
    assert result.returncode == 0, result.stderr
    assert os.geteuid() != 0 or "install -y -qq faforge-no-such-package" in apt
