"""`faforge build PIP_CELL` for real (the pip world): the tiny sdist's glue against PyPI's torch 2.14.1 (the
cached venv on local disk, made as verify's base venvs are) and this machine's nvcc 13.0, linked against the
kernel package the conda world's build of its kernel key made (tests/conda_world: the same package the conda
cells pin, built once per run), then both wheels through faforge.pipwheel. No kernel TU is compiled for pip:
the kernel wheel's library is the kernel package's, byte for byte but for its RUNPATH, and that is said.
The glue's C++ compiles go through the run's compiler cache (tests/support/compile_cache.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from rattler.package_streaming import extract

from faforge.family import FLASH_ATTN
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import pip_builds
from faforge.pipwheel.facts import read_wheel, wheel_contents
from tests.conda_world.conftest import build_in_world, cu130_kernel_package, sdist, world  # noqa: F401  (fixtures: the world's kernel build, once per run)
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "build.json").read_text())
CELL = "pypi/linux-64/py311/torch2.14/cu130/abi1"
SCRUTINISED = (
    ".dynamic",
    ".dynstr",
    ".dynsym",
    ".symtab",
    ".shstrtab",
)  # compared by meaning below, the rest byte for byte


def faforge(*args: str, env: dict | None = None, timeout: int = 2400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def build_env(glue_cxx_dir) -> dict:
    try:
        toolkit = cuda_home()
    except NoCudaToolkit as exc:
        pytest.skip(str(exc))
    cxx = [str(glue_cxx_dir)] if glue_cxx_dir else []
    # FAFORGE_CACHE_DIR: the test cache's faforge folder, where verify's base venvs (torch 2.14.1 for py3.11) already
    # are.
    return {
        "FAFORGE_CACHE_DIR": str(cache_dir("faforge")),
        "CUDA_HOME": str(toolkit),
        "PATH": ":".join([*cxx, os.environ["PATH"]]),
    }


@pytest.fixture(scope="module")
def built(cu130_kernel_package, sdist, build_env, tmp_path_factory, request):  # noqa: F811 (an imported fixture, requested by name)
    out = tmp_path_factory.mktemp("pip-build")
    started = time.monotonic()
    result = faforge(
        "build",
        CELL,
        "--source",
        str(sdist),
        "--kernel-package",
        str(cu130_kernel_package),
        "--output-dir",
        str(out),
        "--json",
        env=build_env,
    )
    seconds = time.monotonic() - started
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
        steps = (
            json.loads(result.stdout)["builds"][0].get("wheel", {}).get("steps_s") if result.returncode == 0 else None
        )
        reporter.write_line(f"\nfaforge build {CELL}: exit {result.returncode} in {seconds:.0f} s (steps, s: {steps})")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return json.loads(result.stdout), result.stderr, out


def test_the_report_matches_its_schema_and_names_the_matrix_wheels(built):
    report, log, out = built
    jsonschema.validate(report, SCHEMA)
    [entry] = report["builds"]
    assert (entry["cell"], entry["part"], entry["status"], entry["kind"]) == (CELL, "all", "built", "wheel")
    build = next(b for b in pip_builds(load_matrix()) if b.cell.id == CELL)
    glue, kernel = entry["wheel"]["glue"], entry["wheel"]["kernel"]
    assert glue["filename"] == build.glue_wheel(glue["platform_tag"]) and kernel["filename"] == build.kernel_wheel(
        kernel["platform_tag"]
    )
    assert Path(glue["path"]).parent == out / "dist" == Path(kernel["path"]).parent
    assert entry["wheel"]["kernel_package"]["from"] == "given" and entry["wheel"]["torch"] == "2.14.1+cu130"
    facts = read_wheel(glue["path"])
    assert facts.requires_dist == build.requires_dist and facts.requires_python == ">=3.11,<3.12"
    assert "+ " in log and "✓" in log, "progress: the commands it runs and timed steps"


def test_no_kernel_tu_is_compiled_and_the_output_says_the_kernel_wheel_only_differs_in_runpath(built):
    report, log, _ = built
    entry = report["builds"][0]
    glue_log = Path(entry["log"]).read_text()
    assert "flash_api.cpp" in glue_log
    assert not [line for line in glue_log.splitlines() if "nvcc" in line and ".cu" in line.replace(".cuda", "")], (
        "a kernel TU was compiled"
    )
    assert "the kernel package's library, byte for byte but for its RUNPATH" in log
    assert entry["wheel"]["kernel"]["runpath"] == ["$ORIGIN/../nvidia/cu13/lib"] and entry["wheel"]["kernel"][
        "was"
    ] == {"rpath": ["$ORIGIN/"], "runpath": []}


def _sections(path: Path) -> tuple[dict, dict, list, set]:
    """(name -> bytes of each section but those patchelf rewrites, .dynsym rows with their section's name,
    .dynamic entries but the string table's place and the search path, .dynstr's strings)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        names = {i: s.name for i, s in enumerate(elf.iter_sections())}
        plain = {
            s.name: s.data()
            for s in elf.iter_sections()
            if s.name and s.name not in SCRUTINISED and s.header.sh_type != "SHT_NOBITS"
        }
        dynsym = elf.get_section_by_name(".dynsym")
        rows = sorted(
            (
                sym.name,
                sym["st_value"],
                sym["st_size"],
                sym["st_info"]["bind"],
                sym["st_info"]["type"],
                sym["st_other"]["visibility"],
                names.get(sym["st_shndx"], sym["st_shndx"]) if isinstance(sym["st_shndx"], int) else sym["st_shndx"],
            )
            for sym in dynsym.iter_symbols()
        )
        dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        # patchelf moves the sections it makes room for (.dynstr grows); an entry holding a section's address is
        # compared as that section's name (whose bytes the first comparison covers).
        at = {s.header.sh_addr: s.name for s in elf.iter_sections() if s.header.sh_addr}
        entries = sorted(
            (
                t.entry.d_tag,
                getattr(t, "needed", None) or getattr(t, "soname", None) or at.get(t.entry.d_val, t.entry.d_val),
            )
            for t in dynamic.iter_tags()
            if t.entry.d_tag not in ("DT_STRSZ", "DT_RPATH", "DT_RUNPATH", "DT_NULL")
        )
        strings = set(elf.get_section_by_name(".dynstr").data().split(b"\0"))
    return plain, {"dynsym": rows}, entries, strings


def test_the_kernel_wheels_library_is_the_kernel_packages_byte_for_byte_but_its_runpath(
    built,
    cu130_kernel_package,  # noqa: F811 (an imported fixture, requested by name)
    tmp_path,
):

    report, _, _ = built
    extract(cu130_kernel_package, tmp_path / "prefix")
    conda = tmp_path / "prefix" / "lib" / FLASH_ATTN.kernel_soname
    pip = tmp_path / FLASH_ATTN.kernel_soname
    pip.write_bytes(
        wheel_contents(Path(report["builds"][0]["wheel"]["kernel"]["path"]))[
            f"libflash_attn_kernels/{FLASH_ATTN.kernel_soname}"
        ]
    )
    before, after = _sections(conda), _sections(pip)
    assert before[0].keys() == after[0].keys() and [n for n in before[0] if before[0][n] != after[0][n]] == [], (
        "every section but the dynamic ones holds the same bytes"
    )
    assert before[1] == after[1], "the same dynamic symbols, at the same addresses, in the same sections"
    assert before[2] == after[2], "the same DT_NEEDED, SONAME and every other dynamic entry"
    # patchelf writes the new RUNPATH string and blanks the old RPATH's with X (its own way of dropping it).
    assert before[3] - after[3] == {b"$ORIGIN/"} and after[3] - before[3] == {
        b"$ORIGIN/../nvidia/cu13/lib",
        b"X" * len("$ORIGIN/"),
    }, "the one string changed is the search path"


def test_a_second_build_finds_both_wheels_and_builds_nothing(built, cu130_kernel_package, sdist, build_env):  # noqa: F811 (an imported fixture, requested by name)
    _, _, out = built
    again = faforge(
        "build",
        CELL,
        "--source",
        str(sdist),
        "--kernel-package",
        str(cu130_kernel_package),
        "--output-dir",
        str(out),
        "--json",
        env=build_env,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    [entry] = json.loads(again.stdout)["builds"]
    assert entry["status"] == "present" and entry["seconds"] < 60
