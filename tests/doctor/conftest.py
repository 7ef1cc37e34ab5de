"""Fixtures for the doctor tests: cached torch venvs, the matrix as users install it, and a runner
that calls `faforge doctor` the way a user does (a subprocess, --json, never a traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from faforge.doctor.offers import Offer, offers_from
from faforge.matrix import load_matrix
from faforge.matrix.render import render_cells
from tests.doctor import envs
from tests.support.tiers import slow
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

SCHEMA = Path(__file__).resolve().parents[1] / "schemas" / "doctor.json"


@dataclass(frozen=True)
class DoctorRun:
    code: int
    report: dict | None
    stdout: str
    stderr: str

    def kinds(self, severity: str = "error") -> list[str]:
        return [p["kind"] for p in self.report["problems"] if p["severity"] == severity]

    def problem(self, kind: str) -> dict:
        return next(p for p in self.report["problems"] if p["kind"] == kind)

    def fix(self, kind: str) -> dict:
        return next(f for f in self.report["fixes"] if f["kind"] == kind)


def doctor(*args: str | Path, json_output: bool = True, env: dict[str, str] | None = None) -> DoctorRun:
    """`faforge doctor ARGS [--json]`; `env` is added to this process's environment."""
    cmd = [sys.executable, "-m", "faforge", "doctor", *map(str, args), *(["--json"] if json_output else [])]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    assert "Traceback" not in result.stderr, result.stderr
    report = None
    if json_output:  # every exit prints one JSON object: the report, or the versioned error object
        report = json.loads(result.stdout)
        jsonschema.validate(report, json.loads(SCHEMA.read_text()))
    return DoctorRun(result.returncode, report, result.stdout, result.stderr)


@pytest.fixture(scope="session")
def run_doctor():
    return doctor


@pytest.fixture(scope="session")
def offers() -> list[Offer]:
    matrix = load_matrix()
    return offers_from(render_cells(matrix.cells, matrix.recipe_path, matrix.variants_dir))


def _torch(version: str):
    try:
        return torch_env(version)
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
@slow("a torch 2.14.1 venv")
def torch_cuda():
    """torch 2.14.1 (CUDA 13.0, cp311) from this machine's disk; ~5 GB, shared with the ABI tests."""
    return _torch("2.14.1")


@pytest.fixture(scope="session")
@slow("a torch 2.13.0 venv")
def torch_cpu():
    """torch 2.13.0+cpu (cp311) from this machine's disk."""
    return _torch("2.13.0")


@pytest.fixture
def cuda_overlay(torch_cuda, tmp_path):
    """A venv of its own that imports the cached torch 2.14.1 (CUDA 13.0)."""
    return envs.overlay(tmp_path / "venv", torch_cuda.python, torch_cuda.site_packages)


@pytest.fixture(scope="session")
def builds(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("doctor-builds")


@pytest.fixture(scope="session")
def real_extension(torch_cuda, builds):
    """flash_attn_2_cuda compiled against torch 2.14.1's real headers, per C++ ABI (cached for the session)."""
    made = {}

    def make(cxx11_abi: int = 1) -> Path:
        if cxx11_abi not in made:
            out = builds / f"real-abi{cxx11_abi}" / f"{envs.EXTENSION}{envs.ext_suffix(torch_cuda.python)}"
            made[cxx11_abi] = envs.extension(
                out,
                torch_cuda.python,
                [envs.REAL_TORCH],
                (f"-D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}", *envs.real_torch_args(torch_cuda.site_packages)),
            )
        return made[cxx11_abi]

    return make
