"""What a pip or uv line would do to an environment's torch, asked of real pip and real uv without a 4 GB
download: `pip install --dry-run --report` and `uv pip install --dry-run` in a venv whose torch is a bare
dist-info (pip and uv read an installed distribution from its METADATA alone), against a loopback wheel
index of tiny wheels (tests/support/tiny_wheels.py) and PyPI, reached for real, as the default index.

A dry run resolves exactly as the install would: pip reads PEP 658 metadata files (PyPI serves them for
torch and NVIDIA's wheels), uv reads metadata only, so the answer "torch 2.11.0 would become 2.14.1" costs
a few MB, never the wheels. pip is pinned (PIP_VERSION) so that what the README quotes is what was run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from faforge.release.pip_env import clean_pip_env, site_packages
from tests.support.cache import cache_dir
from tests.support.pypi import pypi_listing

PIP_VERSION = "26.3"  # the pip the README's measured behaviour quotes (pip 26.3 and uv 0.13.9)
UV = Path(sys.executable).with_name("uv")
_UV_CHANGE = re.compile(r"^ (?P<sign>[+-]) (?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)$", re.MULTILINE)


def uv_env(**extra: str) -> dict[str, str]:
    """No machine or user uv configuration (UV_NO_CONFIG, an empty XDG_CONFIG_HOME for `uv add`/`lock`, which
    read the project's own [tool.uv]); uv's cache in the test cache; no Python downloads."""
    env = {k: v for k, v in clean_pip_env().items() if not k.startswith("UV_")}
    return {**env, "UV_CACHE_DIR": str(cache_dir("uv")), "UV_PYTHON_DOWNLOADS": "never", **extra}


def fake_torch_venvs(folder: Path, torches: tuple[str, ...]) -> dict[str, Path]:
    """torch version -> the python of a venv (this Python, pip PIP_VERSION) holding a torch of that version that is
    only its dist-info: enough for pip and uv to see it installed and to decide whether to keep it. One venv is made
    and given pip; the others are copies of it (a venv's paths are relative but for bin/'s scripts, unused here)."""
    pypi_listing("pip")  # skips the calling test, with the reason, where PyPI cannot be reached
    first = folder / "pip"
    subprocess.run([sys.executable, "-m", "venv", str(first)], check=True, timeout=300, env=clean_pip_env())
    pip = subprocess.run(
        [str(first / "bin" / "python"), "-m", "pip", "install", "-q", f"pip=={PIP_VERSION}"],
        capture_output=True,
        text=True,
        env=clean_pip_env(),
        timeout=600,
        check=False,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    pythons = {}
    for torch in torches:
        venv = folder / f"torch-{torch}"
        shutil.copytree(first, venv, symlinks=True)
        dist_info = site_packages(venv) / f"torch-{torch}.dist-info"
        dist_info.mkdir()
        (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {torch}\n")
        (dist_info / "INSTALLER").write_text("pip\n")
        (dist_info / "RECORD").write_text(
            "".join(f"{dist_info.name}/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD"))
        )
        pythons[torch] = venv / "bin" / "python"
    return pythons


@dataclass(frozen=True)
class DryRun:
    """What one line would do: its exit status, output, and the distributions it would add or remove."""

    line: str
    returncode: int
    output: str
    install: dict[str, str]  # normalised name -> version it would install
    remove: dict[str, str]  # uv only: what it would uninstall first (pip's report lists only what it installs)

    def torch(self) -> str | None:
        """The torch it would install (None: it keeps the installed one, or refuses)."""
        return self.install.get("torch")


def dry_run(line: str, tmp: Path, default_index: str | None = None) -> DryRun:
    """Run the pip or uv install `line` (a shell line, word for word) as a dry run: `--dry-run --report FILE`
    (pip) or `--dry-run` (uv) right after its `install`; `default_index` in place of PyPI, as a user's mirror is
    (PIP_INDEX_URL, UV_DEFAULT_INDEX)."""
    argv = shlex.split(line)
    at = argv.index("install") + 1
    if Path(argv[0]).name == "uv":
        argv = [str(UV), *argv[1:at], "--dry-run", *argv[at:]]
        env = uv_env(UV_NO_CONFIG="1", **({"UV_DEFAULT_INDEX": default_index} if default_index else {}))
        ran = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
        output = ran.stdout + ran.stderr
        changes = {
            s: {canonicalize_name(m["name"]): m["version"] for m in _UV_CHANGE.finditer(output) if m["sign"] == s}
            for s in "+-"
        }
        return DryRun(line, ran.returncode, output, changes["+"], changes["-"])
    report = tmp / f"report-{hashlib.sha256(line.encode()).hexdigest()[:12]}.json"
    argv = [*argv[:at], "--dry-run", "--report", str(report), *argv[at:]]
    env = {**clean_pip_env(), **({"PIP_INDEX_URL": default_index} if default_index else {})}
    ran = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
    install = {}
    if ran.returncode == 0:
        install = {
            canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"]
            for i in json.loads(report.read_text())["install"]
        }
    return DryRun(line, ran.returncode, ran.stdout + ran.stderr, install, {})


def simple_index(root: Path, wheels: list[Path]) -> Path:
    """A minimal PEP 503 index of arbitrary wheels under root (one page per project, sha256 links): the stand-in
    for PyPI that a `uv sync` test takes a tiny torch from (faforge's own index writer serves only our projects)."""
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        projects.setdefault(canonicalize_name(wheel.name.split("-")[0]), []).append(wheel)
    for project, files in projects.items():
        folder = root / project
        folder.mkdir(parents=True, exist_ok=True)
        links = []
        for wheel in files:
            os.link(wheel, folder / wheel.name)
            links.append(
                f'<a href="{wheel.name}#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}">{wheel.name}</a>'
            )
        (folder / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    (root / "index.html").write_text(
        "<!DOCTYPE html><html><body>\n" + "\n".join(f'<a href="{p}/">{p}</a>' for p in projects) + "\n</body></html>\n"
    )
    return root
