"""The conda world, generated once per machine (tests/conda_world/world.py), and the cells built in it."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from faforge import paths
from faforge.family import FLASH_ATTN
from tests.conda_world.cells import CU130, WorldCell
from tests.conda_world.world import build_world, inputs_digest
from tests.conda_world.world_cache import hold, prune_stale_worlds
from tests.recipe.test_build_script_real import _tiny_sdist
from tests.support.cache import cache_dir
from tests.support.tiers import slow

RECIPE_VERSION = yaml.safe_load(paths.recipe_dir().joinpath("recipe.yaml").read_text())["context"]["version"]


def faforge(*args, env=None, timeout=1800):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _say(request, line: str) -> None:
    """A line on the terminal, not captured: CI logs show the world's and each build's cost."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.fixture(scope="session")
@slow("the conda world")
def world(request):
    """The generated world; its size and build time go to the terminal (not captured), as CI logs them."""
    started = time.monotonic()
    built = build_world(log=lambda line: None)
    hold(built)
    for stale in prune_stale_worlds(built.root.parent, inputs_digest()):
        _say(request, f"\nconda world: removed {stale}, a world of other inputs that no run uses")
    download = (
        f", {built.download_seconds:.0f} s of it downloading wheels" if built.download_seconds is not None else ""
    )
    _say(
        request,
        f"\nconda world: {built.size_bytes / 2**30:.2f} GiB of packages at {built.root}, generated in "
        f"{built.seconds:.0f} s{download} "
        f"({'this run' if time.monotonic() - started > built.seconds / 2 else 'cached'})",
    )
    return built


@pytest.fixture(scope="session")
def sdist(tmp_path_factory) -> Path:
    """The tiny flash-attn-shaped sdist (tests/recipe), versioned like the recipe, as a tarball."""
    root = tmp_path_factory.mktemp("sdist")
    src = _tiny_sdist(root / "tree")
    for path in (src / "PKG-INFO", src / "flash_attn/__init__.py"):
        path.write_text(path.read_text().replace("0.0.1", RECIPE_VERSION))
    (src / "LICENSE").write_text("BSD-3-Clause (test stand-in)\n")
    # Upstream's sdist ships an old flash_attn/cute/ at flash-attn-4's paths (2.8.3.post2: 21 files); the recipe
    # leaves it out of flash-attn (tests/conda_world/test_fa4_in_world.py checks the two packages share no file).
    (src / "flash_attn/cute").mkdir()
    for name in ("__init__.py", "interface.py"):
        (src / "flash_attn/cute" / name).write_text("raise ImportError('flash-attn 2.8.3.post2: an old FA4 copy')\n")
    tarball = root / f"flash_attn-{RECIPE_VERSION}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(src, arcname=f"flash_attn-{RECIPE_VERSION}")
    return tarball


@dataclass(frozen=True)
class Built:
    result: subprocess.CompletedProcess
    log: str  # the kernel package's log, then the cell's
    packages: list[Path]  # the flash-attn package(s)
    out: Path

    def kernel_package(self) -> Path:
        """The kernel package this build made; the build must have passed."""
        assert self.result.returncode == 0, (self.result.stdout + self.result.stderr)[-3000:]
        return next((self.out / "linux-64").glob(f"{FLASH_ATTN.kernel_package}-*.conda"))


# Every build of the run, by cell id: test modules elsewhere import these fixtures (tests/pipwheel, tests/pipworld,
# tests/release, tests/doctor), and each import is a fixture of its own, so the cache lives here, once per run.
_BUILT: dict[str, Built] = {}


@pytest.fixture(scope="session")
@slow("a recipe build in the conda world")
def build_in_world(world, sdist, tmp_path_factory, request):
    """`faforge build CELL --source SDIST` against the world's channels, once per cell per run."""
    done = _BUILT

    def build(cell: WorldCell) -> Built:
        if cell.id in done:
            return done[cell.id]
        out = tmp_path_factory.mktemp(f"build-{cell.slug}")
        aliases = [arg for channel in cell.channels for arg in ("--channel-alias", f"{channel}={world.url(channel)}")]
        started = time.monotonic()
        result = faforge(
            "build",
            cell.id,
            "--source",
            str(sdist),
            *aliases,
            "--output-dir",
            str(out),
            env={"CCACHE_DIR": str(cache_dir("conda-world") / "ccache"), **world.rattler_env()},
        )
        logs = sorted((out / "logs").glob("*.log"), key=lambda p: not p.name.endswith("-kernels.log"))
        _say(request, f"\nfaforge build {cell.id}: exit {result.returncode} in {time.monotonic() - started:.0f} s")
        done[cell.id] = Built(
            result, "".join(p.read_text() for p in logs), sorted((out / "linux-64").glob("flash-attn-*.conda")), out
        )
        return done[cell.id]

    return build


@pytest.fixture(scope="session")
def cu130_kernel_package(build_in_world) -> Path:
    """The cu130 cell's kernel package: the one the pip tests repack as the kernel wheel and link the glue against."""
    return build_in_world(CU130).kernel_package()
