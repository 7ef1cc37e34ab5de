"""Cached virtual environments holding a real torch, shared by every test that needs one.

Tests that compile or check against real torch libraries (the ABI gate's clean extension check, the doctor) call
`torch_env(...)`.  The venv lives under the test cache's `venvs/` (tests/support/cache.py, outside the work tree) and is
built once; a lock file keeps two pytest processes from building the same one at the same time.  torch 2.14.1 (CUDA
13.0, cp311) and 2.13.0 (CPU, cp311) install from this machine's local disk (`/opt/pypi-more`, `/opt/wheels` in pip's
config); anything else needs PyPI.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.cache import cache_dir
from tests.support.tiers import slow_work

CACHE = cache_dir("venvs")
PYENV = Path("/root/.pyenv/versions")


class TorchEnvUnavailable(Exception):
    """The venv cannot be built here (no such Python, no such torch wheel); tests skip with this text."""


@dataclass(frozen=True)
class TorchEnv:
    prefix: Path
    python: Path
    site_packages: Path
    torch_version: str

    @property
    def torch_lib(self) -> Path:
        return self.site_packages / "torch" / "lib"


def find_python(python_version: str) -> Path:
    """An interpreter for `python_version` ('3.11'): the running one, then pyenv's, then PATH."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == python_version:
        return Path(sys.executable)
    for candidate in sorted(PYENV.glob(f"{python_version}.*/bin/python{python_version}"), reverse=True):
        return candidate
    found = shutil.which(f"python{python_version}")
    if found:
        return Path(found)
    raise TorchEnvUnavailable(f"no Python {python_version} interpreter (looked in {PYENV} and PATH)")


def torch_env(torch_version: str, python_version: str = "3.11", extra: tuple[str, ...] = ()) -> TorchEnv:
    """A venv with `torch==torch_version` (and `extra` requirements), built on first use."""
    slow_work("a torch venv (tests/support/torch_envs.py)")
    name = f"torch-{torch_version}-py{python_version}" + "".join(f"+{e}" for e in extra)
    prefix = CACHE / name
    python = prefix / "bin" / "python"
    done = prefix / ".faforge-complete"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            _build(prefix, find_python(python_version), [f"torch=={torch_version}", *extra])
            done.write_text(torch_version + "\n")
    site = next((prefix / "lib").glob("python3*/site-packages"))
    return TorchEnv(prefix=prefix, python=python, site_packages=site, torch_version=torch_version)


def _build(prefix: Path, base_python: Path, requirements: list[str]) -> None:
    shutil.rmtree(prefix, ignore_errors=True)
    subprocess.run([str(base_python), "-m", "venv", str(prefix)], check=True)
    pip = [str(prefix / "bin" / "python"), "-m", "pip", "install", "--no-input", "--quiet", *requirements]
    result = subprocess.run(pip, capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(prefix, ignore_errors=True)
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise TorchEnvUnavailable(f"`pip install {' '.join(requirements)}` failed: {' / '.join(tail)}")
