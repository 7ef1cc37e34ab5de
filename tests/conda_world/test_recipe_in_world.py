"""The real recipe, built end to end in the local conda world (the legacy cell too).

`faforge build` runs recipes/flash-attn/recipe.yaml, unmodified but for its upstream source (a tiny
flash-attn-shaped sdist, through `--source`), through py-rattler-build against the world's stand-in
channels (`--channel-alias`), once per cell of tests/conda_world/cells.py: the conda-forge world's
CUDA 13.0 cell and the legacy channel's CUDA 12.4, pre-C++11-ABI cell. rattler-build solves the build,
host and test environments, runs the build script, packages, and runs every test of the recipe. Then
the package goes through verify -> publish -> HTTP -> a fresh py-rattler install -> import -> doctor,
as a user's would.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from faforge.abi import elf
from faforge.channel.local import solve
from faforge.matrix.kernels import kernel_pin
from tests.conda_world.archive import read_info
from tests.conda_world.cells import CELLS
from tests.conda_world.conftest import RECIPE_VERSION, faforge
from tests.conda_world.world_cache import install_from_world
from tests.support.cache import cache_dir
from tests.support.http_server import serve_directory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=CELLS, ids=lambda cell: cell.slug)
def cell(request):
    return request.param


@pytest.fixture(scope="module")
def built(build_in_world, cell):
    b = build_in_world(cell)
    return b.result, b.log, b.packages, b.out


def test_rattler_build_builds_and_runs_every_recipe_test(built):
    result, log, packages, _ = built
    assert result.returncode == 0, result.stdout[-2000:] + log[-6000:]
    assert len(packages) == 1
    # the kernel package's own test: the torch-free check of its library
    assert "passes the torch-free check" in log
    # every test of the flash-attn recipe ran in its own environment: imports + pip check, the ABI gate, the GPU gate
    assert "pip check passed" in log
    assert "ABI gate passed: flash_attn_2_cuda" in log
    assert "faforge-gpu-gate: skipped:" in log


def _index(package: Path) -> dict:
    return json.loads(read_info(package, "info/index.json"))


def test_host_libraries_add_no_run_requirements(built, cell):
    """Header-only host packages: the -dev packages and numpy in host are there for headers; their run_exports must
    not make every user install cuBLAS, cuRAND, cuSOLVER, cuSPARSE and numpy (flash-attn links none)."""
    _, _, packages, _ = built
    names = {dep.split()[0] for dep in _index(packages[0])["depends"]}
    assert not names & {"libcublas", "libcurand", "libcusolver", "libcusparse", "numpy"}, sorted(names)
    assert cell.run_names <= names, sorted(names)


def test_extension_is_stripped(built, tmp_path):
    """Like conda-forge's feedstock (-Wl,--strip-all), no static symbol table ships."""
    _, _, packages, _ = built
    subprocess.run(["python", "-m", "zipfile", "-e", str(packages[0]), str(tmp_path)], check=True)
    subprocess.run(["tar", "--zstd", "-xf", str(next(tmp_path.glob("pkg-*.tar.zst"))), "-C", str(tmp_path)], check=True)
    extension = next(tmp_path.glob("lib/python3.12/site-packages/flash_attn_2_cuda*.so"))
    with open(extension, "rb") as fh:
        sections = {s.name for s in ELFFile(fh).iter_sections()}
    assert ".symtab" not in sections and ".dynsym" in sections


def _unpack(package: Path, into: Path) -> Path:
    subprocess.run(["python", "-m", "zipfile", "-e", str(package), str(into)], check=True)
    subprocess.run(["tar", "--zstd", "-xf", str(next(into.glob("pkg-*.tar.zst"))), "-C", str(into)], check=True)
    return into


def test_the_kernel_package_needs_no_torch_and_the_glue_links_it(built, tmp_path):
    """The split build in the conda world: the kernel output's package depends on no python or torch and holds
    the library; the flash-attn package holds only the glue, which needs that library and finds it
    through the RUNPATH rattler-build gave it ($PREFIX/lib from site-packages)."""
    _, _, packages, out = built
    [kernels] = (out / "linux-64").glob("libflash-attn-kernels-*.conda")
    index = _index(kernels)
    assert not {dep.split()[0] for dep in index["depends"]} & {"python", "pytorch", "libtorch", "python_abi"}, index[
        "depends"
    ]
    assert kernel_pin(_index(packages[0])["depends"]).filename() == kernels.name, (
        "flash-attn pins exactly this kernel build"
    )
    library = _unpack(kernels, tmp_path / "kernels") / "lib" / "libflash_attn_kernels.so"
    assert not [n for n in elf.read_info(library).needed if n.startswith(("libtorch", "libc10", "libpython"))]
    glue = next(
        _unpack(packages[0], tmp_path / "flash-attn").glob("lib/python3.12/site-packages/flash_attn_2_cuda*.so")
    )
    info = elf.read_info(glue)
    assert "libflash_attn_kernels.so.1" in info.needed and "$ORIGIN/../.." in ":".join(info.runpath or info.rpath), (
        info.runpath,
        info.rpath,
    )
    assert not list((tmp_path / "flash-attn").rglob("libflash_attn_kernels.so")), "the library is not carried twice"


def test_verify_publish_serve_install_import_doctor(built, cell, world, tmp_path):
    """The package's way to a user: verify -> publish -> HTTP -> fresh install -> import -> doctor."""
    result, _, packages, _ = built
    assert result.returncode == 0
    package = packages[0]
    env = {"FAFORGE_CACHE_DIR": str(cache_dir("faforge"))}

    [kernels] = package.parent.glob("libflash-attn-kernels-*.conda")
    manifest = tmp_path / "verification"
    verified = faforge(
        "verify",
        str(package),
        str(kernels),
        "--gates",
        "abi,import,gpu",
        "--manifest",
        str(manifest),
        "--json",
        env=env,
    )
    results = {}
    for r in json.loads(verified.stdout)["results"]:
        results.setdefault(r["package"], {})[r["gate"]] = r["result"]
    # the glue resolves libflash_attn_kernels.so through the RUNPATH rattler-build gave it; the kernel
    # package passes its own torch-free and dlopen gates
    assert results == {
        package.name: {"abi": "passed", "import": "passed", "gpu": "skipped"},
        kernels.name: {"abi": "passed", "import": "passed", "gpu": "skipped"},
    }, verified.stdout[-3000:] + verified.stderr[-3000:]

    channel = tmp_path / "channel"
    published = faforge(
        "publish",
        str(package),
        str(kernels),
        "--manifest",
        str(manifest),
        "--to",
        str(channel),
        "--require",
        "abi,import",
        env=env,
    )
    assert published.returncode == 0, published.stdout + published.stderr
    assert (channel / "linux-64" / package.name).read_bytes() == package.read_bytes()
    assert (channel / "linux-64" / kernels.name).read_bytes() == kernels.read_bytes()

    prefix = tmp_path / "env"
    with serve_directory(channel) as url:
        # our channel first, the torch world's after it, strict priority: as the README tells users
        records = solve(
            [url, *(world.url(channel) for channel in cell.channels)],
            ["python 3.12.*", "flash-attn"],
            "linux-64",
            virtuals={"__glibc": "2.36", "__cuda": cell.cuda, "__linux": "6.1", "__unix": "0"},
        )
        assert str(records["flash-attn"].channel).rstrip("/").endswith(url.rstrip("/").split("//")[1]) or url in str(
            records["flash-attn"].url
        )
        assert str(records["pytorch"].version) == cell.torch.split("+")[0]
        install_from_world(world, records, prefix)
    python = prefix / "bin" / "python3.12"

    # libpython resolves inside the environment (the relocated CPython), and the extension imports
    ldd = subprocess.run(["ldd", str(python)], capture_output=True, text=True, check=True).stdout
    assert f"{prefix}/bin/../lib/libpython3.12.so.1.0" in ldd or f"{prefix}/lib/libpython3.12.so.1.0" in ldd, ldd
    probe = (
        "import flash_attn, flash_attn_2_cuda, torch; print(flash_attn.__version__, torch.__version__); "
        "print(*sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libflash_attn_kernels' in l}))"
    )
    imported = subprocess.run([str(python), "-c", probe], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert imported.stdout.split() == [
        RECIPE_VERSION,
        cell.torch,
        str(prefix / "lib" / "libflash_attn_kernels.so.1"),
    ]  # its SONAME

    doctor = faforge("doctor", "--python", str(python), "--json", env=env)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == 0, json.dumps(report.get("problems"), indent=1)[:3000] + doctor.stderr[-2000:]
