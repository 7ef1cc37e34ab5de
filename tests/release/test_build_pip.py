"""`faforge build PIP_CELL` before and around the build (the pip world): what it refuses up front, where it looks
for the kernel package, and what it skips. The real build is tests/release/test_build_pip_real.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import jsonschema
import pytest

from faforge.channel.local import PackageSpec, assemble
from faforge.costmodel.runners import load_build_cost, split_kernels
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.pipwheel.writer import WheelSpec, write_wheel
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "build.json").read_text())
CELL = "pypi/linux-64/py311/torch2.14/cu130/abi1"
TAG = "manylinux_2_28_x86_64"


def faforge(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def build():
    return next(b for b in pip_builds(load_matrix()) if b.cell.id == CELL)


@pytest.fixture(scope="module")
def toolkit() -> dict:
    try:
        return {"CUDA_HOME": str(cuda_home())}
    except NoCudaToolkit as exc:
        pytest.skip(str(exc))


def test_both_wheels_in_the_output_folder_are_present_and_nothing_is_built(build, toolkit, tmp_path):
    dist = tmp_path / "out" / "dist"
    kernel = write_wheel(
        WheelSpec(
            name=build.kernel.name,
            version=build.kernel_wheel_version,
            build_tag=build.kernel_wheel_build_tag,
            python_tags=("py3",),
            abi_tags=("none",),
            platform_tags=(TAG,),
            files={"libflash_attn_kernels/__init__.py": b""},
        ),
        dist,
    )
    glue = write_wheel(
        WheelSpec(
            name="flash-attn",
            version=build.glue_version,
            build_tag=build.glue_build_tag,
            python_tags=("cp311",),
            abi_tags=("cp311",),
            platform_tags=(TAG,),
            requires_dist=build.requires_dist,
            files={"flash_attn/__init__.py": b""},
        ),
        dist,
    )
    result = faforge("build", CELL, "--output-dir", str(tmp_path / "out"), "--json", env=toolkit)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    [entry] = report["builds"]
    assert (entry["status"], entry["kind"], entry["package"]) == ("present", "wheel", str(glue))
    assert entry["wheel"]["kernel"]["path"] == str(kernel) and "already in" in result.stderr
    assert not (tmp_path / "out" / "linux-64").exists(), "no kernel package was built for a cell whose wheels are there"


def test_a_wheel_job_without_its_kernel_package_fails_naming_the_job_that_builds_it(build, toolkit, tmp_path):
    result = faforge("build", CELL, "--part", "wheel", "--output-dir", str(tmp_path / "out"), "--json", env=toolkit)
    assert result.returncode == 1, result.stderr
    [entry] = json.loads(result.stdout)["builds"]
    assert entry["status"] == "failed" and build.kernel_build in entry["error"] and "--part kernels" in entry["error"]
    assert "Traceback" not in result.stderr


def test_a_given_kernel_package_of_another_build_is_refused_before_any_work(build, toolkit, tmp_path):
    other = assemble(
        PackageSpec(
            build.kernel.name,
            build.kernel.version,
            build.kernel_build.replace(build.kernel_build.split("_")[-2], "h0000000"),
            "linux-64",
        ),
        tmp_path / "channel",
    )
    result = faforge("build", CELL, "--kernel-package", str(other), "--output-dir", str(tmp_path / "out"), env=toolkit)
    assert result.returncode == 2 and build.kernel_build in result.stderr and "none of these cells" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow
def test_a_kernel_package_in_the_output_folder_is_found(build, toolkit, tmp_path):
    """The kernel package `faforge build CELL --part kernels` left in OUTPUT_DIR/<platform>/ is the one a wheel job
    takes (this stand-in holds no library, so the job stops there, having found it; the torch venv is the cached
    one)."""
    out = tmp_path / "out"
    assemble(PackageSpec(build.kernel.name, build.kernel.version, build.kernel_build, "linux-64"), out)
    sdist = tmp_path / "flash_attn-2.8.3.post2.tar.gz"
    (tmp_path / "PKG-INFO").write_text("Name: flash_attn\n")
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tmp_path / "PKG-INFO", arcname="flash_attn-2.8.3.post2/PKG-INFO")
    result = faforge(
        "build",
        CELL,
        "--part",
        "wheel",
        "--output-dir",
        str(out),
        "--json",
        "--source",
        str(sdist),
        env={**toolkit, "FAFORGE_CACHE_DIR": str(cache_dir("faforge"))},
    )
    assert result.returncode == 1, result.stderr
    [entry] = json.loads(result.stdout)["builds"]
    assert entry["status"] == "failed" and "holds no regular file lib/libflash_attn_kernels.so.1" in entry["error"]
    assert f"{build.kernel_build}.conda (output folder)" in Path(entry["log"]).read_text()


def test_a_pip_cells_kernel_parts_are_the_conda_kernel_jobs(matrix_cost=None):
    """A pip-only kernel key's pieces are named as `faforge plan` names them; a wrong one lists them."""
    cell = "pypi/linux-64/py312/torch2.8/cu128/abi1"
    pieces = [p.name for p in split_kernels(load_build_cost(), "linux-64", "80;90;100;120+PTX") if p.tus]
    result = faforge("build", cell, "--part", "bwd-9of9", "--output-dir", "/nonexistent-never-made")
    assert result.returncode == 2 and f"its kernel package's pieces are {', '.join(pieces)}" in result.stderr
