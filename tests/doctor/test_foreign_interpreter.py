"""`faforge doctor --python` on an aarch64 interpreter from this x86_64 machine (the aarch64 cells): the probe runs
through the same qemu wrapper as verify's import gate (faforge.abi.emulator), so its facts are the target's;
without qemu doctor says why it cannot look, and runs nothing.

The interpreter is Debian's arm64 python3.11 as a plain prefix (tests/support/debian_toolchains.py).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from tests.support.debian_toolchains import DebianUnavailable, arm64_plain_python
from tests.support.tiers import slow


@pytest.fixture(scope="module")
@slow("Debian's arm64 Python under qemu")
def arm():
    if platform.machine() != "x86_64":
        pytest.skip("an x86_64 machine emulating aarch64")
    try:
        return arm64_plain_python()
    except DebianUnavailable as exc:
        pytest.skip(f"Debian's arm64 python3.11 / qemu-user-static: {exc}")


def doctor(python, env):
    return subprocess.run(
        [sys.executable, "-m", "faforge", "doctor", "--python", str(python), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"], **env},
    )


def test_the_probe_runs_emulated_and_reports_the_target(arm):
    result = doctor(arm.python, {"FAFORGE_QEMU": str(arm.qemu), "FAFORGE_SYSROOT": str(arm.sysroot)})
    facts = json.loads(result.stdout)["facts"]
    assert facts["system"]["machine"] == "aarch64" and facts["system"]["platform"] == "linux-aarch64"
    assert facts["python"]["ext_suffix"] == ".cpython-311-aarch64-linux-gnu.so"
    assert facts["torch"]["installed"] is False and result.returncode == 1  # a finding (no torch), not an error


def test_without_qemu_doctor_says_why_and_runs_nothing(arm):
    result = doctor(arm.python, {})
    assert result.returncode == 2, result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]["message"]
    assert (
        "is built for aarch64 and this machine is x86_64" in error
        and "qemu-aarch64 (or qemu-aarch64-static) is not on PATH" in error
    )
