"""Real loads of aarch64 wheels as their packages load them: Debian's arm64 Python under qemu-user (its glibc
ld.so does the loading) imports PyPI's aarch64 CPU torch, then runs a probe script; and the gate, run
as verify runs it for a foreign platform. Shared by the real-wheel tests of the ABI gate
(test_helper_beside_module.py, test_torch_ops_wheels.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from faforge.abi.check import check_path
from faforge.abi.report import Verdict
from tests.support.aarch64_cross import CrossUnavailable, arm64_torch_site
from tests.support.debian_toolchains import Arm64Python, DebianUnavailable, arm64_plain_python


def arm64_python() -> Arm64Python:
    try:
        return arm64_plain_python()
    except DebianUnavailable as exc:
        pytest.skip(str(exc))


def arm64_sites(torches: Iterable[str]) -> dict[str, Path]:
    """site-packages of PyPI's aarch64 torch of each release for CPython 3.11 (cached), or a skip."""
    try:
        return {torch: arm64_torch_site(torch, "3.11") for torch in sorted(set(torches))}
    except CrossUnavailable as exc:
        pytest.skip(str(exc))


def emulated(arm64: Arm64Python, script: str, args: Iterable[str], torch: str, timeout: int = 900) -> dict:
    """Run `script` in the emulated Python; its last stdout line as JSON, whose "torch" must be release `torch`."""
    result = subprocess.run(
        [str(arm64.qemu), "-L", str(arm64.sysroot), str(arm64.python), "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["torch"].split("+")[0] == torch
    return answer


def two_at_a_time(load: Callable, pairings: list) -> dict:
    """{pairing: load(pairing)}, two emulated processes at a time (each is about a minute on a busy 2-core machine)."""
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(pairings, pool.map(load, pairings), strict=True))


def gate(path: Path, site: Path, arm64: Arm64Python) -> Verdict:
    """The gate as verify runs it for a foreign platform: the target's libc and libstdc++ from its sysroot."""
    return check_path(path, [site], platform="linux-aarch64", library_dirs=[arm64.sysroot / "lib"])
