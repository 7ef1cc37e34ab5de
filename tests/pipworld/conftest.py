"""The pip world end to end (its acceptance), for the x86_64 cells: their wheels built, gated and
published by faforge into one wheel index root, once per session (these fixtures), from what the conda world
already built; tests/pipworld/test_x86_64_cells.py serves that root on loopback and installs from it with
real pip and real uv.

- ABI 1: `faforge build pypi/linux-64/py311/torch2.14/cu130/abi1 --source <tiny sdist> --kernel-package K`, K the
  conda world's kernel package of its key (tests/conda_world: build_in_world(CU130), the package the conda
  cell pins), the glue against PyPI's torch 2.14.1 (clean_env's cached base venv) with this machine's CUDA 13.0;
- ABI 0: `faforge build pypi/linux-64/py312/torch2.5/cu124/abi0 ...`, K the legacy conda cell's (LEGACY:
  the same kernel key, linux-64/cu124/sm80_90ptx/philox32), the glue against PyPI's torch 2.5.1 for CPython 3.12
  (C++ ABI 0) with Debian's CUDA 12.4 as CUDA home, the toolkit the legacy conda cell compiles with;
- FA3: the committed canary (tests/gpu/canary/flash-attn-3/) through `faforge wheel fa3`.
Gated by `faforge verify --gates abi,import` (the gpu gate needs a GPU, which these tests do not ask for, so
publish requires abi,import), then `faforge publish *.whl --index ROOT --require abi,import`. No kernel TU is
compiled here (the conda world's builds did it, and `faforge build` reuses them); the glue compiles share the
run's compiler cache (glue_cxx_dir, tests/conftest.py); no torch is downloaded: every torch is a cached base
venv, skipped with the reason where one is missing.

Each phase's time goes to the terminal as it ends (not captured, as the conda world's builds report theirs)
and in one table at the end of the session.
"""

from __future__ import annotations

import contextlib
import json
import lzma
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from faforge.release.clean_env import BASE_EXTRAS, pypi_torch_venv
from faforge.release.pip_env import venv_copy
from faforge.release.venv_cache import Unavailable
from tests.conda_world.cells import CU130, LEGACY, WorldCell
from tests.conda_world.conftest import _say, build_in_world, sdist, world  # noqa: F401  (session fixtures: the world's builds)
from tests.gpu.fa3_canary import FOLDER
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.debian_toolchains import DebianUnavailable, debian_cuda_12_4
from tests.support.http_server import serve_directory
from tests.support.tiers import slow, slow_work

# Where faforge keeps its base venvs of PyPI torches in the tests (shared with tests/release and tests/conda_world).
FAFORGE_CACHE = cache_dir("faforge")
GATES = "abi,import"


@dataclass(frozen=True)
class PipWorldCell:
    """A pip cell these tests build, and the cached torch venv its wheels install beside."""

    key: str
    id: str
    torch: str  # PyPI's torch release of the cell (its base venv)
    python: str
    index: str  # its wheel index, BASE/<index>/
    world_cell: WorldCell | None  # the conda world's cell whose kernel package it repacks (the same kernel key)


ABI1 = PipWorldCell("abi1", "pypi/linux-64/py311/torch2.14/cu130/abi1", "2.14.1", "3.11", "torch2.14-cu130", CU130)
ABI0 = PipWorldCell("abi0", "pypi/linux-64/py312/torch2.5/cu124/abi0", "2.5.1", "3.12", "torch2.5-cu124", LEGACY)
# The FA3 canary (sm90a, CUDA 13.0, torch>=2.9) is published into every cu130 index from torch 2.11 on; installed
# beside torch 2.14.1.
FA3 = PipWorldCell("fa3", "linux-64/cu130/sm90a", "2.14.1", "3.11", "torch2.14-cu130", None)
FA3_RANGE = (("2.11.0", "3.12"), ("2.14.1", "3.11"))  # the oldest and newest torch of its cu130 indexes, cached


def faforge(*args, env: dict | None = None, timeout: int = 3600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "FAFORGE_CACHE_DIR": str(FAFORGE_CACHE), **(env or {})},
    )


def base_venv(torch: str, python: str):
    """clean_env's cached base venv of PyPI's torch==`torch` for `python`, the very venv `faforge verify` uses, made on
    first use in the test cache (pip downloads that torch and its CUDA wheels once per machine; every later test and
    run reuses it). Skipped with clean_env's reason only where it cannot be made (no such Python, no PyPI)."""
    slow_work("a pip world venv (tests/pipworld/conftest.py)")

    os.environ.setdefault("FAFORGE_CACHE_DIR", str(FAFORGE_CACHE))
    try:
        return pypi_torch_venv(f"=={torch}", python, BASE_EXTRAS)  # the very venvs verify caches
    except Unavailable as exc:
        pytest.skip(f"no base venv of PyPI torch {torch} for Python {python}: {exc}")


@pytest.fixture
def venv_of(monkeypatch):
    """A context manager: a hardlink copy of the cached base venv of a torch, removed at the end of the test."""
    monkeypatch.setenv(
        "FAFORGE_CACHE_DIR", str(FAFORGE_CACHE)
    )  # venv_copy makes it under faforge's cache: the base venv's file system
    return venv_copy


class Clock:
    """Each phase's wall time: one line on the terminal as it ends, one table at the end of the session."""

    def __init__(self, request):
        self.request = request
        self.rows: list[tuple[str, str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str, what: str, command: str | None = None):
        """Time the block as phase `name` (build, verify, publish, pip, uv, doctor, ...) of `what`; `command`, the
        line it ran, is shown on the terminal but not in the table."""
        started = time.monotonic()
        try:
            yield
        finally:
            seconds = time.monotonic() - started
            self.rows.append((name, what, seconds))
            _say(self.request, f"\npip world: {name} {what}: {seconds:.1f} s" + (f"\n  $ {command}" if command else ""))

    def table(self) -> str:
        width = max((len(f"{n} {w}") for n, w, _ in self.rows), default=10)
        lines = [f"{n} {w}".ljust(width) + f"  {s:7.1f} s" for n, w, s in self.rows]
        totals = {}
        for name, _, seconds in self.rows:
            totals[name] = totals.get(name, 0.0) + seconds
        return "\n".join(
            ["pip world, time per phase:", *lines, "totals: " + ", ".join(f"{n} {s:.0f} s" for n, s in totals.items())]
        )


@pytest.fixture(scope="session")
def clock(request):
    timer = Clock(request)
    yield timer
    if timer.rows:
        _say(request, "\n" + timer.table())


# ------------------------------------------------------------------------------------------------- the builds


@pytest.fixture(scope="session")
def cuda_13_home() -> Path:
    try:
        return cuda_home()
    except NoCudaToolkit as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
@slow("Debian's CUDA 12.4")
def cuda_12_4_home(tmp_path_factory) -> Path:
    """Debian's CUDA 12.4 (unpacked once per machine) as a CUDA home: bin/ (nvcc and the tools it runs), include/ and
    lib64/ linked to Debian's layout, as torch's cpp_extension and `faforge build --cuda-home` read a toolkit."""
    try:
        cuda = debian_cuda_12_4()
    except DebianUnavailable as exc:
        pytest.skip(str(exc))
    home = tmp_path_factory.mktemp("cuda-12.4")
    (home / "bin").mkdir()
    (home / "bin" / "nvcc").symlink_to(cuda.nvcc)
    for tool in sorted(cuda.bin.iterdir()):
        if (
            tool.name != "nvcc"
        ):  # usr/bin/nvcc is Debian's wrapper, which execs the machine's /usr/lib/nvidia-cuda-toolkit
            (home / "bin" / tool.name).symlink_to(tool)
    (home / "include").symlink_to(cuda.include)
    (home / "lib64").symlink_to(cuda.root / "usr" / "lib" / "x86_64-linux-gnu")
    return home


def _build(cell: PipWorldCell, kernel: Path, sdist: Path, cuda: Path, glue_cxx_dir, out: Path, clock: Clock) -> dict:  # noqa: F811 (an imported fixture, requested by name)
    """`faforge build PIP_CELL --source SDIST --kernel-package K --cuda-home CUDA`: the --json `wheel` object."""
    cxx = [str(glue_cxx_dir)] if glue_cxx_dir else []
    with clock.phase("build", cell.id):
        result = faforge(
            "build",
            cell.id,
            "--source",
            sdist,
            "--kernel-package",
            kernel,
            "--cuda-home",
            cuda,
            "--output-dir",
            out,
            "--json",
            env={"PATH": os.pathsep.join([*cxx, os.environ["PATH"]])},
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    [entry] = json.loads(result.stdout)["builds"]
    assert entry["status"] == "built" and entry["wheel"]["kernel_package"]["from"] == "given", entry
    return entry["wheel"]


def _cell_wheels(
    cell: PipWorldCell,
    build_in_world,  # noqa: F811 (an imported fixture, requested by name)
    sdist: Path,  # noqa: F811 (an imported fixture, requested by name)
    cuda: Path,
    glue_cxx_dir,
    tmp_path_factory,
    clock: Clock,
) -> dict:
    """The conda world's build of the cell's kernel key (its kernel package; shared with the conda tests' builds
    through the compiler cache), then `faforge build PIP_CELL` from it: the --json `wheel` object."""
    base_venv(cell.torch, cell.python)
    with clock.phase("build", f"{cell.world_cell.id} (conda world: its kernel package)"):
        kernel = build_in_world(cell.world_cell).kernel_package()
    return _build(cell, kernel, sdist, cuda, glue_cxx_dir, tmp_path_factory.mktemp(f"pip-{cell.key}"), clock)


@pytest.fixture(scope="session")
def abi1_wheels(build_in_world, sdist, cuda_13_home, glue_cxx_dir, tmp_path_factory, clock) -> dict:  # noqa: F811 (an imported fixture, requested by name)
    return _cell_wheels(ABI1, build_in_world, sdist, cuda_13_home, glue_cxx_dir, tmp_path_factory, clock)


@pytest.fixture(scope="session")
def abi0_wheels(build_in_world, sdist, cuda_12_4_home, glue_cxx_dir, tmp_path_factory, clock) -> dict:  # noqa: F811 (an imported fixture, requested by name)
    return _cell_wheels(ABI0, build_in_world, sdist, cuda_12_4_home, glue_cxx_dir, tmp_path_factory, clock)


@pytest.fixture(scope="session")
@slow("an FA3 wheel build")
def fa3_wheel(tmp_path_factory, clock) -> dict:
    """The FA3 canary (CUDA 13.0, sm90a) as `faforge wheel fa3` packs it: the --json `wheel` object."""
    manifest = json.loads((FOLDER / "manifest.json").read_text())
    work = tmp_path_factory.mktemp("pip-fa3")
    raw = work / manifest["file"].removesuffix(".xz")
    raw.write_bytes(lzma.decompress((FOLDER / manifest["file"]).read_bytes()))
    with clock.phase("build", f"FA3 {FA3.id} (faforge wheel fa3 of the canary)"):
        result = faforge("wheel", "fa3", raw, "--cuda", "13.0", "--archs", "90a", "--out", work / "dist", "--json")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return json.loads(result.stdout)["wheel"]


@dataclass(frozen=True)
class Published:
    root: Path  # the wheel index root (ROOT/files/, ROOT/<index>/...)
    manifest: Path
    wheels: dict[str, Path]  # abi1-glue, abi1-kernel, abi0-glue, abi0-kernel, fa3
    verify: dict[str, dict]  # cell key -> `faforge verify --json` report
    publish: dict  # `faforge publish --json` report
    versions: dict[str, str]  # cell key -> the version pip is asked for (flash-attn or flash-attn-3)

    def of(self, key: str) -> list[Path]:
        """The wheels of one cell key (abi1: its glue and kernel wheels; fa3: the FA3 wheel)."""
        return [path for name, path in self.wheels.items() if name.split("-")[0] == key]


@pytest.fixture(scope="session")
@slow("the pip world's venvs and index")
def published(abi1_wheels, abi0_wheels, fa3_wheel, tmp_path_factory, clock) -> Published:
    """Every wheel gated (abi, import) into one manifest, then published into one index root, as CI does."""
    work = tmp_path_factory.mktemp("pip-index")
    manifest, root = work / "verification", work / "wheels"
    wheels = {
        "abi1-glue": abi1_wheels["glue"]["path"],
        "abi1-kernel": abi1_wheels["kernel"]["path"],
        "abi0-glue": abi0_wheels["glue"]["path"],
        "abi0-kernel": abi0_wheels["kernel"]["path"],
        "fa3": fa3_wheel["path"],
    }
    wheels = {k: Path(v) for k, v in wheels.items()}
    against = [arg for torch, python in FA3_RANGE for arg in ("--against", base_venv(torch, python).site_packages)]
    runs = {
        "abi1": [wheels["abi1-glue"], wheels["abi1-kernel"]],
        "abi0": [wheels["abi0-glue"], wheels["abi0-kernel"]],
        "fa3": [wheels["fa3"], *against],
    }
    reports = {}
    for key, args in runs.items():
        with clock.phase("verify", f"{key} --gates {GATES}"):
            result = faforge("verify", *args, "--gates", GATES, "--manifest", manifest, "--json")
        assert result.stdout.strip(), result.stderr[-3000:]
        reports[key] = json.loads(result.stdout)
        failed = [
            (r["package"], r["gate"], r["result"], r["detail"])
            for r in reports[key]["results"]
            if r["result"] != "passed"
        ]
        assert result.returncode == 0 and not failed, failed or result.stderr[-3000:]
    with clock.phase("publish", f"{len(wheels)} wheels --require {GATES}"):
        result = faforge(
            "publish", *wheels.values(), "--index", root, "--manifest", manifest, "--require", GATES, "--json"
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    versions = {
        "abi1": abi1_wheels["glue"]["version"],
        "abi0": abi0_wheels["glue"]["version"],
        "fa3": fa3_wheel["version"],
    }
    return Published(root, manifest, wheels, reports, json.loads(result.stdout), versions)


@pytest.fixture(scope="session")
def static_base(published) -> str:
    """ROOT served as the README serves it: `python -m http.server --bind 127.0.0.1 --directory ROOT PORT` (a free
    port, its own process; HTML only, no content negotiation). The base URL, http://127.0.0.1:PORT/."""
    with serve_directory(published.root) as url:
        yield url
