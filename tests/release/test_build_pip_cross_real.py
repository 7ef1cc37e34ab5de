"""`faforge build` of a linux-aarch64 pip cell for real, on this x86_64 machine (the pip world): the tiny sdist's glue
cross-compiled by the backend without importing the target torch (build_flash_attn.py --torch-site: PyPI's aarch64
torch 2.11.0, its version, folders and C++ ABI read from the files; --python-include/--python-library: Debian's arm64
CPython 3.11; aarch64-linux-gnu-g++ with the flags torch's cpp_extension gives a CUDAExtension), linked against the
cell's kernel package (its library cross-built by the backend, nvcc 13.0 -ccbin aarch64-linux-gnu-g++ -target-dir
sbsa-linux, then assembled: no aarch64 conda world here), then both wheels through faforge.pipwheel. The build is
shared with tests/pipworld/test_aarch64_cell.py (tests/support/aarch64_cross.cross_pip_build: once per session)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.abi.classify import cxx11_abi_of
from faforge.abi.elf import read_dynamic_symbols, read_info
from faforge.abi.emulator import find_emulator
from faforge.family import FLASH_ATTN
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.pipwheel.facts import read_wheel, wheel_contents
from tests.conda_world.conftest import sdist  # noqa: F401  (fixture: the tiny sdist, versioned like the recipe)
from tests.support.aarch64_cross import CXX, CrossUnavailable, cross_pip_build, cross_toolchain
from tests.support.cache import cache_dir

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "build.json").read_text())
CELL = "pypi/linux-aarch64/py311/torch2.11/cu130/abi1"
EXTENSION = f"{FLASH_ATTN.extension}.cpython-311-aarch64-linux-gnu.so"


@pytest.fixture(scope="module")
def cross():
    try:
        tools = cross_toolchain("2.11.0")
    except CrossUnavailable as exc:
        pytest.skip(str(exc))
    return tools, next(b for b in pip_builds(load_matrix()) if b.cell.id == CELL)


@pytest.fixture(scope="module")
def built(cross, sdist, tmp_path_factory, request):  # noqa: F811 (an imported fixture, requested by name)
    tools, build = cross
    # FAFORGE_CACHE_DIR: the test cache's faforge folder, where the glue build's tools venv for CPython 3.11 already is.
    done = cross_pip_build(
        tools, sdist, tmp_path_factory.mktemp("arm-pip-build"), build, {"FAFORGE_CACHE_DIR": str(cache_dir("faforge"))}
    )
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        steps = (
            json.loads(done.result.stdout)["builds"][0].get("wheel", {}).get("steps_s")
            if done.result.returncode == 0
            else None
        )
        seconds = {k: round(v) for k, v in done.seconds.items()}
        reporter.write_line(
            f"\nfaforge build {CELL}: exit {done.result.returncode}; seconds {seconds}, its steps {steps}"
        )
    return done


def test_the_cell_builds_and_its_wheels_are_the_matrix_ones(cross, built):
    _, build = cross
    report = built.report()
    jsonschema.validate(report, SCHEMA)
    [entry] = report["builds"]
    assert (entry["cell"], entry["part"], entry["status"], entry["kind"]) == (CELL, "all", "built", "wheel")
    glue, kernel = entry["wheel"]["glue"], entry["wheel"]["kernel"]
    assert glue["filename"] == build.glue_wheel(glue["platform_tag"]) and kernel["filename"] == build.kernel_wheel(
        kernel["platform_tag"]
    )
    assert glue["platform_tag"].endswith("_aarch64") and kernel["platform_tag"].endswith("_aarch64")
    facts = read_wheel(glue["path"])
    assert (
        facts.requires_dist == build.requires_dist
        and facts.requires_python == build.cell.requires_python == ">=3.11,<3.12"
    )
    assert entry["wheel"]["torch"] == "2.11.0+cu130" and entry["wheel"]["kernel_package"]["from"] == "given"
    assert entry["wheel"]["raw_wheel"] == f"{FLASH_ATTN.module}-{build.version}-cp311-cp311-linux_aarch64.whl"


def test_the_glue_is_compiled_by_the_cross_compiler_with_cpp_extensions_flags_and_no_torch_import(built):
    log = Path(built.report()["builds"][0]["log"]).read_text()
    compile_line = next(line for line in log.splitlines() if line.startswith("[build_flash_attn] compile: "))
    assert CXX in compile_line
    for flag in (
        "-std=c++17",
        "-D_GLIBCXX_USE_CXX11_ABI=1",
        f"-DTORCH_EXTENSION_NAME={FLASH_ATTN.extension}",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-fPIC",
        "targets/sbsa-linux/include",
        "torch/include/torch/csrc/api/include",
    ):
        assert flag in compile_line, flag
    link_line = next(line for line in log.splitlines() if line.startswith("[build_flash_attn] link: "))
    for flag in (
        "-shared",
        "-Wl,--no-undefined",
        "-Wl,-rpath,$ORIGIN/torch/lib",
        "-ltorch_python",
        "libpython3.11",
        FLASH_ATTN.kernel_soname,
    ):
        assert flag in link_line, flag
    assert "removed DT_NEEDED libpython3.11.so.1.0" in log and "uses _GLIBCXX_USE_CXX11_ABI=1" in log
    assert "torch does not import" not in log and "import torch" not in log


def test_the_glue_is_an_aarch64_module_of_cxx_abi_1_without_libpython(built, tmp_path):
    glue = Path(built.report()["builds"][0]["wheel"]["glue"]["path"])
    extension = tmp_path / EXTENSION
    extension.write_bytes(wheel_contents(glue)[EXTENSION])
    info = read_info(extension)
    assert info.machine == "aarch64"
    assert cxx11_abi_of({s.name for s in read_dynamic_symbols(extension).all_symbols()}) == 1
    assert FLASH_ATTN.kernel_soname in info.needed and not [n for n in info.needed if n.startswith("libpython")], (
        info.needed
    )


def test_check_abi_passes_against_the_aarch64_torch_site_with_the_sysroot(cross, built, tmp_path):
    tools, _ = cross
    entry = built.report()["builds"][0]["wheel"]
    kernel = tmp_path / "kernel"
    for name, data in wheel_contents(Path(entry["kernel"]["path"])).items():
        (kernel / name).parent.mkdir(parents=True, exist_ok=True)
        (kernel / name).write_bytes(data)
    system = find_emulator("aarch64", str(tools.python.qemu), str(tools.python.sysroot)).library_dirs()
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "check-abi",
            entry["glue"]["path"],
            "--against",
            str(tools.torch_site),
            "--library-dir",
            str(kernel / "libflash_attn_kernels"),
            *(a for d in system for a in ("--library-dir", str(d))),
            "--platform",
            "linux-aarch64",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    verdict = json.loads(checked.stdout)
    assert verdict["torch"]["version"] == "2.11.0+cu130" and verdict["torch"]["machine"] == "aarch64"
