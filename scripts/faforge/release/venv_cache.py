"""A venv made once per name under faforge's cache by real pip, and reused: the one place faforge installs a venv.

Each is built on first use under a file lock (two verify calls at once build it once), from a working CPython of
the asked version (this one, python3.X on PATH, or pyenv's), with wheels only; a pip that cannot reach its index
says so. Any failure is Unavailable: the gate that needed the venv is `skipped` with that reason, never passed.
Apart from what the venvs hold (faforge.release.clean_env: PyPI's torch, its CUDA runtime;
faforge.release.build.pip_wheels: the glue build's tools).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from faforge import config

# What pip (urllib3) prints when it cannot reach an index at all.
PIP_NETWORK_ERROR = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Network is unreachable|"
    r"Connection refused|Failed to establish a new connection"
)


class Unavailable(Exception):
    """No environment matching the package can be made here; the check is `skipped` with this reason."""


def _runs_as(python: Path, version: str) -> bool:
    """pyenv puts shims for every version on PATH; one whose version is not selected exits 127."""
    try:
        result = subprocess.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0 and result.stdout.strip() == version


def find_python(version: str) -> Path:
    """A working CPython <version>: this one, python<version> on PATH, then pyenv's installs."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return Path(sys.executable)
    candidates = [Path(found)] if (found := shutil.which(f"python{version}")) else []
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates += sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
    for candidate in candidates:
        if _runs_as(candidate, version):
            return candidate
    raise Unavailable(
        f"no working Python {version} interpreter (tried "
        f"{', '.join(map(str, candidates)) or f'python{version} on PATH'})"
    )


def _install(prefix: Path, python: Path, requirements: list[str]) -> None:
    shutil.rmtree(prefix, ignore_errors=True)
    made = subprocess.run([str(python), "-m", "venv", str(prefix)], capture_output=True, text=True)
    if made.returncode != 0:
        raise Unavailable(
            f"`{python} -m venv` failed (exit {made.returncode}): {(made.stderr or made.stdout).strip()[-300:]}"
        )
    pip = [
        str(prefix / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--no-input",
        "--quiet",
        "--only-binary",
        ":all:",
        *requirements,
    ]
    result = subprocess.run(pip, capture_output=True, text=True)
    if result.returncode != 0:
        shutil.rmtree(prefix, ignore_errors=True)
        output = result.stderr or result.stdout
        # Offline, pip ends with "conflicting dependencies"/"no matching distribution"; the cause is the network.
        unreachable = PIP_NETWORK_ERROR.search(output)
        if unreachable:
            raise Unavailable(
                f"`pip install {' '.join(requirements)}` could not reach the package index "
                f"({unreachable.group(0)}); the gate needs PyPI's torch wheel (network, or a pip mirror)"
            )
        tail = " / ".join(output.strip().splitlines()[-3:])
        raise Unavailable(f"`pip install {' '.join(requirements)}` failed: {tail}")


def cached_venv(
    folder: str, name: str, python_version: str, requirements: list[str], what: str, announce: Callable[[str], None]
) -> Path:
    """config.cache_dir()/folder/name with `requirements`, built on first use under a lock; `announce`
    hears about it first (`what` says what pip is fetching)."""
    root = config.cache_dir() / folder
    prefix = root / name
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = prefix / ".faforge-complete"
        if not done.exists():
            python = find_python(python_version)
            announce(
                f"first use: creating {prefix} with {what} for Python {python_version} "
                "(pip downloads and installs it, from seconds to minutes; cached for later runs)"
            )
            _install(prefix, python, requirements)
            done.write_text("ok\n")
    return prefix
