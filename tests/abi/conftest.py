"""Fixtures for the ABI gate tests: g++-built stand-ins for torch's libraries and extensions using them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tests.abi import elf_fixtures as fx
from tests.support.tiers import slow

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "check-abi.json").read_text())
DLOPEN = """
import ctypes, os, sys
try:
    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)
except OSError as exc:
    print(exc)
    sys.exit(1)
"""


@pytest.fixture(scope="session")
@slow("g++ compiles of the ELF fixtures")
def gxx() -> fx.Toolchain:
    tool = fx.host_gxx()
    if tool is None:
        pytest.skip("g++ is not installed; the ABI fixtures are compiled with it")
    return tool


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory, gxx) -> dict[tuple[str, int], Path]:
    """(signature, abi) -> a torch/lib stand-in folder holding libc10.so and libc10_cuda.so."""
    root = tmp_path_factory.mktemp("torch-stand-ins")
    return {
        (sig, abi): fx.build_library(gxx, root / f"{sig}-abi{abi}", sig, abi).parent
        for sig in fx.SIGNATURES
        for abi in fx.ABIS
    }


@pytest.fixture(scope="session")
def extensions(tmp_path_factory, gxx, stand_ins) -> dict[tuple[str, int], Path]:
    """(signature, abi) -> an extension built against the matching stand-in."""
    root = tmp_path_factory.mktemp("extensions")
    return {
        key: fx.build_extension(gxx, root / f"ext_{key[0]}_abi{key[1]}.so", *key, stand_ins[key]) for key in stand_ins
    }


def dlopen(path: Path, library_dir: Path) -> tuple[bool, str]:
    """Whether the real dynamic linker loads `path` with RTLD_NOW, in a fresh Python process."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(library_dir)}
    result = subprocess.run([sys.executable, "-c", DLOPEN, str(path)], env=env, capture_output=True, text=True)
    return result.returncode == 0, result.stdout.strip()


def validate(report: dict) -> dict:
    jsonschema.validate(report, SCHEMA)
    return report


def run_faforge(*args: str) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, in a subprocess (so a traceback would be visible on stderr)."""
    return subprocess.run([sys.executable, "-m", "faforge", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def arm64():
    """Debian's arm64 Python under qemu-user, for the real-loader tests of aarch64 wheels (arm64_loads), or a skip."""
    from tests.abi.arm64_loads import arm64_python  # noqa: PLC0415  (only those tests pay for its imports)

    return arm64_python()


@pytest.fixture(scope="module")
def sites(request) -> dict:
    """PyPI's aarch64 torch (site-packages) of every release the test module's PAIRINGS ((what, torch) pairs) name."""
    from tests.abi.arm64_loads import arm64_sites  # noqa: PLC0415  (as above)

    return arm64_sites(t for _, t in request.module.PAIRINGS)
