"""aarch64 Python environments that real pip and real uv install into on this x86_64 machine (the pip world).

* arm64_venv: `python3.11 -m venv --without-pip` of Debian's arm64 python3.11 run under qemu
  (tests/support/debian_toolchains.arm64_plain_python), its site-packages a hardlink copy (`cp -al`) of PyPI's
  aarch64 torch site (tests/support/aarch64_cross.arm64_torch_site): torch 2.11.0 and its NVIDIA wheels are
  installed in the venv as pip put them, with their dist-info, at no disk cost and without a download; what is
  installed later adds files and never writes into the shared ones (pip and uv unlink before they replace).
* install_pip: the venv's own pip, since Debian's python3.11 ships no ensurepip: pip installed by pip itself,
  run from its wheel by the emulated Python (`python pip.whl/pip install --target`, pip's documented way to run
  from a wheel), once per machine into the test cache (arm64-pip/site-<versions>), then hardlinked into each
  venv's site-packages. einops comes with it: the emulated Python has no `ssl` (Debian's _ssl needs
  libssl3:arm64, not unpacked here), so its pip reaches the loopback index over http but not https://pypi.org,
  and einops is the one requirement of the glue that neither the torch site nor our index brings. Both wheels
  (py3-none-any) are downloaded once by this machine's pip into the test cache (arm64-pip/wheels).
* The interpreter runs as `qemu-aarch64-static -L SYSROOT VENV/bin/python` (no binfmt_misc on these machines);
  Python finds its venv from pyvenv.cfg beside the path it is started by, as on a real aarch64 machine.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.cache import cache_dir
from tests.support.debian_toolchains import Arm64Python
from tests.support.tiers import slow_work

SITE = "lib/python3.11/site-packages"
# pip: the version this machine's test venv runs (the same pip on both machines); einops: what verify's base venvs hold.
BOOTSTRAP = (f"pip=={importlib.metadata.version('pip')}", "einops==0.8.2")
EMULATED_TIMEOUT_S = 1800


class Arm64VenvUnavailable(Exception):
    """pip and einops for the emulated Python cannot be had here (no network, cold cache); tests skip with this text."""


def emulated(python: Arm64Python, program: Path, *args: str) -> list[str]:
    """The command that runs the aarch64 `program` (a venv's bin/python) here under qemu."""
    return [str(python.qemu), "-L", str(python.sysroot), str(program), *map(str, args)]


def bootstrap_wheels() -> Path:
    """The folder holding pip's and einops' wheels (BOOTSTRAP), downloaded once by this machine's pip."""
    slow_work("pip's aarch64 bootstrap wheels (tests/support/aarch64_pip.py)")
    folder = cache_dir("arm64-pip") / "wheels"
    done = folder / "FETCH.json"
    if done.is_file() and json.loads(done.read_text()).get("requirements") == list(BOOTSTRAP):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(folder),
                *BOOTSTRAP,
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if result.returncode != 0:
            raise Arm64VenvUnavailable(f"pip could not download {', '.join(BOOTSTRAP)}: {result.stderr.strip()[-300:]}")
        done.write_text(json.dumps({"requirements": list(BOOTSTRAP)}) + "\n")
    return folder


def arm64_venv(python: Arm64Python, dest: Path, torch_site: Path) -> Path:
    """A venv of Debian's arm64 python3.11 at `dest` holding the torch site's files (hardlinks); its bin/python."""
    slow_work("an emulated arm64 venv (tests/support/aarch64_pip.py)")
    subprocess.run(
        emulated(python, python.python, "-m", "venv", "--without-pip", dest),
        check=True,
        capture_output=True,
        text=True,
        timeout=EMULATED_TIMEOUT_S,
    )
    site = dest / SITE
    subprocess.run(["cp", "-al", f"{torch_site}/.", str(site)], check=True, capture_output=True, text=True)
    return dest / "bin" / "python"


def bootstrap_site(python: Arm64Python) -> Path:
    """A site-packages folder holding pip and einops for the emulated python3.11, installed there once per machine by
    that very pip, run from its wheel under qemu, offline (--no-index); Arm64VenvUnavailable with pip's complaint."""
    folder = cache_dir("arm64-pip") / ("site-" + "-".join(r.replace("==", "") for r in BOOTSTRAP))
    site, done = folder / "site-packages", folder / "DONE"
    if done.is_file():
        return site
    wheels = bootstrap_wheels()
    with open(folder.parent / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.is_file():
            return site
        shutil.rmtree(folder, ignore_errors=True)
        pip_wheel = next(wheels.glob(f"pip-{BOOTSTRAP[0].split('==')[1]}-*.whl"))
        run = subprocess.run(
            emulated(
                python,
                python.python,
                f"{pip_wheel}/pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-index",
                "--find-links",
                wheels,
                "--target",
                site,
                *BOOTSTRAP,
            ),
            capture_output=True,
            text=True,
            timeout=EMULATED_TIMEOUT_S,
            env={**emulated_env(), "PIP_NO_CACHE_DIR": "1"},
            check=False,
        )
        if run.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise Arm64VenvUnavailable(
                f"the emulated pip could not install {', '.join(BOOTSTRAP)}: {run.stderr.strip()[-300:]}"
            )
        done.write_text(json.dumps({"requirements": list(BOOTSTRAP)}) + "\n")
    return site


def install_pip(python: Arm64Python, venv_python: Path) -> None:
    """The venv's own pip and einops: the bootstrap site's files, hardlinked into its site-packages."""
    site = venv_python.parents[1] / SITE
    subprocess.run(["cp", "-al", f"{bootstrap_site(python)}/.", str(site)], check=True, capture_output=True, text=True)


def emulated_env() -> dict:
    """The environment of a process run under qemu (qemu passes it on): this machine's Python and pip settings left out,
    pip's configuration files switched off (PIP_CONFIG_FILE=/dev/null), so the machine's own indexes play no part."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull}
