"""Acceptance (the pip world): real pip and real uv install from the loopback wheel index, then import and doctor, for
the x86_64 cells (the ABI-1 cell pypi/linux-64/py311/torch2.14/cu130/abi1, the ABI-0 cell
pypi/linux-64/py312/torch2.5/cu124/abi0 (torch <= 2.6), the FA3 wheel); a wrong-torch request ends in a resolver
error with nothing installed. (The aarch64 cell, under qemu: tests/pipworld/test_aarch64_cell.py.)

The wheels are the real ones, built, gated and published once per session (tests/pipworld/conftest.py:
`faforge build` of the tiny sdist's glue and the conda world's kernel packages, `faforge wheel fa3` of the
canary, `faforge verify --gates abi,import`, `faforge publish --index ROOT --require abi,import`). The gpu gate
needs a GPU and is left out here, so the publish requires abi,import only: a GPU runner's gpu-test job adds it.

The index is checked by faforge (`faforge index --pip --check`, on disk and over HTTP) and read by two real
clients: pip (its own index parser, PEP 503 HTML from `python -m http.server` as the README serves the folder,
and the PEP 691 JSON from the negotiating server, tests/support/pip_index_server.py) and uv. Every install is
the documented line (faforge.pipindex.instructions, the function doctor and the page print it with) run word for
word in a hardlink copy (faforge.release.pip_env.venv_copy) of clean_env's cached venv of PyPI's torch, with no
machine configuration (PIP_CONFIG_FILE=/dev/null, UV_NO_CONFIG=1); PyPI is the default index, reached for real.
The venv already holds the torch the line pins, so nothing downloads a torch; the copies are removed after.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.pipindex import instructions
from faforge.pipwheel.facts import wheel_contents
from faforge.release.pip_env import clean_pip_env, site_packages
from tests.pipworld.conftest import (
    ABI0,
    ABI1,
    FA3,
    PipWorldCell,
    base_venv,
    faforge,
)
from tests.support.cache import cache_dir
from tests.support.pip_index_server import JSON_TYPE, pages_served, serve_index

pytestmark = pytest.mark.slow

UV = Path(sys.executable).with_name("uv")
CELLS = {c.key: c for c in (ABI1, ABI0, FA3)}
OURS = {
    "abi1": {FLASH_ATTN.package, FLASH_ATTN.kernel_package},
    "abi0": {FLASH_ATTN.package, FLASH_ATTN.kernel_package},
    "fa3": {FLASH_ATTN_3.package},
}
ALLOWED = {"einops"}  # the glue's one requirement besides torch and its kernel wheel (already in the cached venvs)
# What `python -I -c "import ..."` must import from the venv (the first one's __file__ is checked).
IMPORTS = {
    "abi1": (FLASH_ATTN.module, FLASH_ATTN.extension),
    "abi0": (FLASH_ATTN.module, FLASH_ATTN.extension),
    "fa3": (FLASH_ATTN_3.module, f"{FLASH_ATTN_3.module}._C"),
}
# The wrong torch: the ABI-0 index's flash-attn (torch>=2.5,<2.6, cp312) beside PyPI's torch 2.11.0 for the same
# CPython 3.12, so that torch is the one thing that disagrees (beside torch 2.14.1, a cp311 venv, the cp312
# wheel would be refused for its Python tag before torch is even looked at).
WRONG_TORCH = ("2.11.0", "3.12")
FA3_REPORT = "flash_attn_3"  # doctor --json's FlashAttention-3 part
UV_LINE = re.compile(r"^ (?P<sign>[+-]) (?P<name>[A-Za-z0-9._-]+)==(?P<version>\S+)$", re.MULTILINE)
PIP_DOWNLOAD = re.compile(r"^\s*Downloading (?P<what>\S+)", re.MULTILINE)


def uv_env() -> dict[str, str]:
    """No machine or user configuration; uv's cache in the test cache; `uv` (the test extra) first on PATH."""
    env = {k: v for k, v in clean_pip_env().items() if not k.startswith("UV_")}
    return {
        **env,
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": str(cache_dir("uv")),
        "UV_PYTHON_DOWNLOADS": "never",
        "PATH": os.pathsep.join([str(UV.parent), env.get("PATH", "")]),
    }


def line_for(installer: str, cell: PipWorldCell, version: str, python: Path, base: str, torch: str) -> str:
    """The documented line (README, doctor's fix, the page): pipindex.instructions, the cell's index under `base`."""
    index = instructions.index_url(cell.index, base)
    if cell is FA3:
        pins = (f"torch=={torch}", f"{FLASH_ATTN_3.package}=={version}")
    else:
        pins = instructions.requirements(version, torch)
    return (
        instructions.pip_command(index, pins, str(python))
        if installer == "pip"
        else instructions.uv_command(index, pins, str(python))
    )


@dataclass(frozen=True)
class Ran:
    line: str
    returncode: int
    output: str

    def installed(self, installer: str) -> dict[str, str]:
        """Normalised name -> version of what the installer says it added."""
        if installer == "uv":
            return {
                canonicalize_name(m["name"]): m["version"] for m in UV_LINE.finditer(self.output) if m["sign"] == "+"
            }
        match = re.search(r"^Successfully installed (.+)$", self.output, re.MULTILINE)
        return {
            canonicalize_name(item.rpartition("-")[0]): item.rpartition("-")[2]
            for item in (match[1].split() if match else [])
        }

    def removed(self) -> list[str]:
        return [m["name"] for m in UV_LINE.finditer(self.output) if m["sign"] == "-"] + re.findall(
            r"^\s*Successfully uninstalled (\S+)$", self.output, re.MULTILINE
        )

    def downloads(self) -> list[str]:
        """What pip or uv says it downloaded (pip: `Downloading URL`; uv: `Downloading NAME` for a large file)."""
        return [m["what"] for m in PIP_DOWNLOAD.finditer(self.output)]

    def torch_downloads(self) -> list[str]:
        """Downloads of torch or of NVIDIA's wheels (none: the venv's torch is kept, its metadata read locally)."""
        return [
            d for d in self.downloads() if Path(urllib.parse.unquote(d)).name.split("-")[0] == "torch" or "nvidia" in d
        ]


def run_line(line: str, installer: str) -> Ran:
    env = uv_env() if installer == "uv" else clean_pip_env()
    result = subprocess.run(shlex.split(line), capture_output=True, text=True, env=env, timeout=1800, check=False)
    return Ran(line, result.returncode, result.stdout + result.stderr)


def torch_record(prefix: Path) -> Path:
    return next(site_packages(prefix).glob("torch-*.dist-info")) / "RECORD"


def assert_torch_untouched(copy: Path, base) -> None:
    """torch's RECORD is still the cached venv's very file (the same inode): nothing reinstalled or removed torch."""
    assert os.stat(torch_record(copy)).st_ino == os.stat(torch_record(base.prefix)).st_ino, "torch was reinstalled"


def install_import_doctor(installer: str, key: str, published, base_url: str, served: str, clock, venv_of) -> Ran:
    """The documented line in a fresh copy of the cell's torch venv, from the index at `base_url` (`served`: how), then
    the import and doctor; what the installer did."""
    if installer == "uv" and not UV.is_file():
        pytest.skip(f"uv is not installed beside {sys.executable} (a test extra: pip install -e '.[test]')")
    cell, version = CELLS[key], published.versions[key]
    base = base_venv(cell.torch, cell.python)
    with venv_of(base.prefix) as prefix:
        python = prefix / "bin" / "python"
        line = line_for(installer, cell, version, python, base_url, cell.torch)
        with clock.phase(installer, f"{key} ({served})", line):
            ran = run_line(line, installer)
        assert ran.returncode == 0, f"$ {line}\n{ran.output[-4000:]}"
        installed = ran.installed(installer)
        assert OURS[key] <= installed.keys() <= OURS[key] | ALLOWED, installed
        assert installed[canonicalize_name(FLASH_ATTN_3.package if cell is FA3 else FLASH_ATTN.package)] == version
        assert ran.removed() == [], ran.output
        assert_torch_untouched(prefix, base)
        for wheel in published.of(key):
            for member, data in wheel_contents(wheel).items():
                if ".dist-info/" not in member:
                    assert (site_packages(prefix) / member).read_bytes() == data, f"{member} is not {wheel.name}'s"
        modules = IMPORTS[key]
        imported = subprocess.run(
            [str(python), "-I", "-c", f"import {', '.join(modules)}; print({modules[0]}.__file__)"],
            capture_output=True,
            text=True,
            env=clean_pip_env(),
            timeout=300,
            check=False,
        )
        assert imported.returncode == 0, imported.stderr[-3000:]
        assert imported.stdout.strip().startswith(str(site_packages(prefix))), "imported from the venv itself"
        with clock.phase("doctor", f"{key} (after {installer})"):
            doctor = faforge("doctor", "--python", python, "--json", timeout=600)
        report = json.loads(doctor.stdout)
        assert doctor.returncode == 0, (report["problems"], report.get(FA3_REPORT), doctor.stderr[-2000:])
        assert report["facts"]["torch"]["version"].split("+")[0] == cell.torch
        if (
            cell is FA3
        ):  # flash-attn-3 alone is a healthy environment: no flash-attn-missing, no fix to install flash-attn
            assert report[FA3_REPORT]["healthy"] is True and report[FA3_REPORT]["torch"].split("+")[0] == cell.torch
            assert report["healthy"] is True and report["fixes"] == [], report["problems"]
            assert not [p for p in report["problems"] if p["severity"] == "error"], report["problems"]
        else:
            assert report["healthy"] is True and report["fixes"] == [], report["problems"]
            assert report["facts"]["flash_attn"]["version"] == version and report["facts"]["import"]["ok"] is True
    return ran


# ------------------------------------------------------------------------------------------ built, gated, published


def test_each_wheel_passed_abi_and_import_and_is_listed_by_its_indexes(published):
    gated = {(r["package"], r["gate"]): r["result"] for report in published.verify.values() for r in report["results"]}
    assert set(gated.values()) == {"passed"} and {g for _, g in gated} == {"abi", "import"}
    assert {name for name, _ in gated} == {p.name for p in published.wheels.values()}
    actions = {r["package"]: r["action"] for r in published.publish["packages"]}
    assert actions == {p.name: "published" for p in published.wheels.values()}, actions
    files = sorted(p.name for p in (published.root / "files").glob("*.whl"))
    assert files == sorted(p.name for p in published.wheels.values())
    listed = {
        index.name: sorted(p.name for p in index.iterdir() if p.is_dir())
        for index in published.root.iterdir()
        if index.name != "files" and index.is_dir()
    }
    assert sorted(listed) == [ABI1.index, ABI0.index], "one index per glue's (torch minor, CUDA), nothing else"
    # FA3 (cu130, torch>=2.9): every index of its CUDA that the glue wheels make and its torch range admits: here only
    # torch2.14-cu130.
    assert listed[ABI1.index] == [FLASH_ATTN.package, FLASH_ATTN_3.package, FLASH_ATTN.kernel_package]
    assert listed[ABI0.index] == [FLASH_ATTN.package, FLASH_ATTN.kernel_package]


def test_the_index_passes_its_check_on_disk_and_over_http(published, static_base, tmp_path, clock):
    with clock.phase(
        "index", "--pip --check ROOT, and two index URLs over python -m http.server and the PEP 691 server"
    ):
        on_disk = faforge("index", "--pip", "--check", published.root)
        assert on_disk.returncode == 0, on_disk.stdout + on_disk.stderr
        for index in (ABI1.index, ABI0.index):
            served = faforge("index", "--pip", "--check", f"{static_base}{index}/")
            assert served.returncode == 0, served.stdout + served.stderr
        with serve_index(published.root, tmp_path / "requests.jsonl") as base:
            negotiated = faforge("index", "--pip", "--check", f"{base}{ABI1.index}/")
        assert negotiated.returncode == 0, negotiated.stdout + negotiated.stderr


# ------------------------------------------------------------------------------------------ install, import, doctor


@pytest.mark.parametrize("installer", ["pip", "uv"])
@pytest.mark.parametrize("key", ["abi1", "abi0", "fa3"])
def test_the_documented_line_installs_only_our_wheels_beside_the_kept_torch(
    installer, key, published, static_base, clock, venv_of
):
    """Over `python -m http.server` (PEP 503 HTML): pip's and uv's own index parsers read it; wheels from loopback."""
    ran = install_import_doctor(
        installer, key, published, static_base, "PEP 503 HTML, python -m http.server", clock, venv_of
    )
    if installer == "pip":
        fetched = {urllib.parse.unquote(Path(d).name) for d in ran.downloads() if d.startswith(f"{static_base}files/")}
        assert {w.name for w in published.of(key)} <= fetched, "from the loopback index"
        assert "Requirement already satisfied: torch==" in ran.output, "pip kept the installed torch"
    assert ran.torch_downloads() == [], ran.downloads()


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pip_and_uv_read_the_pep_691_json(installer, published, tmp_path, clock, venv_of):
    """The negotiating server answers JSON to a client that asks for it; both do, and install from it alone."""
    log = tmp_path / "requests.jsonl"
    with serve_index(published.root, log) as base:
        install_import_doctor(installer, "abi1", published, base, "PEP 691 JSON, negotiated", clock, venv_of)
    assert pages_served(log) == {JSON_TYPE}, "every index page was read as PEP 691 JSON"


# ------------------------------------------------------------------------------------------ the wrong torch


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_flash_attn_beside_the_wrong_torch_minor_is_a_resolver_error_and_installs_nothing(
    installer, published, static_base, clock, venv_of
):
    """The documented line for the ABI-0 index (flash-attn for torch 2.5) in a venv of PyPI's torch 2.11.0, pinned as
    the line pins the installed torch: both resolvers refuse from metadata alone, before any install or torch
    download."""
    if installer == "uv" and not UV.is_file():
        pytest.skip(f"uv is not installed beside {sys.executable} (a test extra: pip install -e '.[test]')")
    torch, python_version = WRONG_TORCH
    base = base_venv(torch, python_version)
    with venv_of(base.prefix) as prefix:
        python = prefix / "bin" / "python"
        before = sorted(p.name for p in site_packages(prefix).iterdir())
        line = line_for(installer, ABI0, published.versions["abi0"], python, static_base, torch)
        with clock.phase(installer, f"wrong torch: {ABI0.index}'s flash-attn beside torch {torch}", line):
            ran = run_line(line, installer)
        if installer == "pip":
            assert ran.returncode == 1, ran.output[-3000:]
            assert "ResolutionImpossible" in ran.output and "conflicting dependencies" in ran.output, ran.output[-3000:]
            assert (
                f"The user requested torch=={torch}" in ran.output and "depends on torch<2.6 and >=2.5" in ran.output
            ), ran.output[-3000:]
        else:
            assert ran.returncode == 1, ran.output[-3000:]
            assert "No solution found when resolving dependencies" in ran.output, ran.output[-3000:]
            assert f"torch=={torch}" in ran.output and "torch>=2.5,<2.6" in ran.output, ran.output[-3000:]
        assert ran.installed(installer) == {} and ran.removed() == []
        assert sorted(p.name for p in site_packages(prefix).iterdir()) == before, "nothing was installed"
        assert not (site_packages(prefix) / FLASH_ATTN.module).exists()
        assert ran.torch_downloads() == [], ran.downloads()
        assert_torch_untouched(prefix, base)
