"""The aarch64 pip cell end to end (the pip world's acceptance): pypi/linux-aarch64/py311/torch2.11/cu130/abi1, its two
wheels built, gated by `faforge verify`, published by `faforge publish --index`, served by `python -m http.server`
on loopback, installed by real pip and by real uv beside PyPI's real aarch64 torch 2.11.0, imported under qemu,
and `faforge doctor` healthy on the result. Nothing downloads a torch.

The wheels: `faforge build CELL --kernel-package K --torch-site <the aarch64 torch site> --target-python <Debian's arm64
python3.11> --cuda-home <the sbsa overlay>` (tests/support/aarch64_cross.cross_pip_build, shared with
tests/release/test_build_pip_cross_real.py, once per session):
  - K, the conda kernel package of the cell's kernel key: its library cross-built by the backend (build_flash_attn.py
    --kernels-only, nvcc 13.0 -ccbin aarch64-linux-gnu-g++ -target-dir sbsa-linux) for the cell's arch list and
    Philox layout, packed under the matrix's exact build string (faforge.channel.local.assemble: the documented
    fallback, standing in for rattler-build's linux-aarch64 cross build);
  - the glue, cross-compiled by the backend against PyPI's aarch64 torch 2.11.0 read from its files (build_flash_attn.py
    --torch-site, aarch64-linux-gnu-g++ with cpp_extension's flags), then the kernel wheel and the glue wheel as for
    linux-64 (faforge.pipwheel). The glue's tag follows Debian 12's cross toolchain (manylinux_2_34_aarch64: it
    needs GLIBC_2.32); CI's would follow its manylinux_2_28 container.
The gates: `faforge verify --gates abi,import` with --against the aarch64 torch site and the emulator (abi natively
with the sysroot, import under qemu, for both wheels), then `faforge publish --index ROOT --require abi,import`.

The installs, each into its own aarch64 venv (tests/support/aarch64_pip.py: Debian's arm64 python3.11 -m venv under
qemu, its site-packages a hardlink copy of the torch site, so torch 2.11.0 is installed, with its dist-info, as pip
put it there):
  - pip: the venv's own pip, run by the emulated interpreter, so the real resolver sees the real installed torch
    and computes the target's tags itself (manylinux_2_36_aarch64 from the emulated glibc), as on an aarch64
    machine; preferred to this machine's `pip --platform --target`, which ignores what is installed. The emulated
    Python has no ssl, so its only index is the loopback one (no PyPI extra index; einops came with the venv's
    pip): anything the resolver wanted beyond our two wheels, another torch above all, is a resolver error,
    never a download. pip's configuration is switched off (PIP_CONFIG_FILE=/dev/null), so the machine's own
    indexes play no part;
  - uv: this machine's uv for the target (--python-platform aarch64-manylinux_2_36 --python-version 3.11) with the
    venv's site-packages as --target, which uv reads as the installed environment: it keeps torch. Its line is
    doctor's (`--extra-index-url` our index, PyPI the default index, for einops): uv takes each package from the
    first index that has it. A --dry-run first must change no torch. uv does reinstall nvidia-cusparselt-cu13
    0.8.0 (its installed WHEEL says manylinux2014_sbsa, which matches no aarch64 tag); that wheel is cached in the
    test cache's uv folder after the first run.
  - import: `import torch, flash_attn, flash_attn_2_cuda` under qemu in each venv, the kernel library and the CUDA
    runtime loaded from the venv (pip's layout, through the RUNPATHs);
  - doctor: `faforge doctor --python VENV/bin/python --json` (under qemu, faforge.abi.emulator) is healthy: the glue for
    torch 2.11.0 (C++ ABI 1, CUDA 13.0), its abi gate ok, no fix to run (no GPU here: a warning only).
Every phase's time goes to the terminal and into the pip world's table (the `clock` of tests/pipworld/conftest.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from faforge.abi import elf
from faforge.abi.fatbin import read_gpu_archs
from faforge.family import FLASH_ATTN
from faforge.matrix import load_matrix
from faforge.matrix.pip_builds import PipBuild, pip_builds
from faforge.pipwheel.facts import wheel_contents
from faforge.pipwheel.manylinux import is_external
from tests.pipworld.conftest import FAFORGE_CACHE, faforge
from tests.support.aarch64_cross import CrossToolchain, CrossUnavailable, cross_pip_build, cross_toolchain
from tests.support.aarch64_pip import (
    SITE,
    Arm64VenvUnavailable,
    arm64_venv,
    bootstrap_site,
    emulated,
    emulated_env,
    install_pip,
)
from tests.support.cache import cache_dir
from tests.support.http_server import serve_directory

pytestmark = pytest.mark.slow

CELL = "pypi/linux-aarch64/py311/torch2.11/cu130/abi1"
TORCH = "2.11.0"  # PyPI's aarch64 torch of the cell (its release, tests/support/aarch64_cross.arm64_torch_site)
GATES = "abi,import"
EXTENSION = f"{FLASH_ATTN.extension}.cpython-311-aarch64-linux-gnu.so"
UV = Path(sys.executable).with_name("uv")
AUDITWHEEL = Path(sys.executable).with_name("auditwheel")
# What an install may change beside our wheels: einops (the glue's requirement) and, for uv, NVIDIA's cusparselt wheel,
# whose installed WHEEL tag (manylinux2014_sbsa) uv matches against no aarch64 platform, so it reinstalls the same
# version.
ALSO_INSTALLED = {"einops"}
REINSTALLED_BY_UV = {"nvidia-cusparselt-cu13"}
IMPORT = f"""
import json, torch, flash_attn, {FLASH_ATTN.extension}
maps = sorted({{l.split(None, 5)[5].strip() for l in open('/proc/self/maps')
                if len(l.split(None, 5)) == 6 and l.split(None, 5)[5].startswith('/')}})
print(json.dumps({{"torch": torch.__version__, "flash_attn": flash_attn.__file__,
                  "extension": {FLASH_ATTN.extension}.__file__, "maps": maps}}))
"""


@dataclass(frozen=True)
class Arm:
    tools: CrossToolchain
    build: PipBuild  # the matrix's cell, its kernel package's exact build string and the wheel names


@pytest.fixture(scope="module")
def arm() -> Arm:
    try:
        tools = cross_toolchain(TORCH)
        bootstrap_site(tools.python)
    except (CrossUnavailable, Arm64VenvUnavailable) as exc:
        pytest.skip(str(exc))
    if not UV.is_file():
        pytest.skip("uv is not installed beside this Python (a test extra: pip install -e '.[test]')")
    build = next(b for b in pip_builds(load_matrix()) if b.cell.id == CELL)
    assert (build.cell.torch, build.cell.python, build.cell.cuda, build.cell.cxx11_abi) == (TORCH, "3.11", "13.0", 1), (
        build.cell
    )
    return Arm(tools, build)


def run_emulated(arm: Arm, program: Path, *args, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(
        emulated(arm.tools.python, program, *args),
        capture_output=True,
        text=True,
        env=emulated_env(),
        timeout=timeout,
        check=False,
    )


def glibc(arm: Arm) -> str:
    """The emulated machine's glibc (its sysroot's), '2.36': the manylinux level uv is told the target has."""
    run = run_emulated(arm, arm.tools.python.python, "-c", "import platform; print(platform.libc_ver()[1])")
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


# ------------------------------------------------------------------------------------------------- the wheels


@pytest.fixture(scope="module")
def wheels(
    arm, sdist, tmp_path_factory, clock
) -> dict[str, dict]:  # sdist: the conda world's tiny sdist (tests/pipworld/conftest.py)
    """The glue and kernel wheels of the cell, as `faforge build CELL --json` reports them (its `wheel` object)."""
    with clock.phase(
        "cross-build", f"{CELL} (kernel package: the backend's cross build, assembled; faforge build --torch-site)"
    ):
        built = cross_pip_build(
            arm.tools, sdist, tmp_path_factory.mktemp("arm-cell"), arm.build, {"FAFORGE_CACHE_DIR": str(FAFORGE_CACHE)}
        )
        [entry] = built.report()["builds"]
    return entry["wheel"]


def test_the_wheels_are_the_matrix_cells_with_auditwheels_tags(arm, wheels, tmp_path):
    build = arm.build
    glue, kernel = wheels["glue"], wheels["kernel"]
    assert glue["filename"] == build.glue_wheel(glue["platform_tag"]) and kernel["filename"] == build.kernel_wheel(
        kernel["platform_tag"]
    )
    assert tuple(glue["requires_dist"]) == build.requires_dist
    library = tmp_path / FLASH_ATTN.kernel_soname
    library.write_bytes(
        next(
            data
            for name, data in wheel_contents(Path(kernel["path"])).items()
            if name.endswith(FLASH_ATTN.kernel_soname)
        )
    )
    archs = read_gpu_archs(library)
    assert (archs.sass, archs.ptx) == (("sm_80", "sm_90", "sm_100", "sm_120"), ("compute_120",)), (
        "the cell's arch list 80;90;100;120+PTX"
    )
    for report in (glue, kernel):
        path, tag = Path(report["path"]), report["platform_tag"]
        assert tag.startswith("manylinux_") and tag.endswith("_aarch64"), tag
        shown = subprocess.run(
            [str(AUDITWHEEL), "show", "--json", str(path)], capture_output=True, text=True, timeout=300, check=False
        )
        assert shown.returncode == 0, shown.stderr
        verdict = json.loads(shown.stdout)
        assert verdict["sym_tag"] == tag, verdict
        assert all(is_external(lib) for lib in verdict["external_libs"]), verdict["external_libs"]


# ------------------------------------------------------------------------------------------------- gates and index


@dataclass(frozen=True)
class Index:
    root: Path
    verify: dict  # `faforge verify --json`
    publish: dict  # `faforge publish --json`


@pytest.fixture(scope="module")
def index(arm, wheels, tmp_path_factory, clock) -> Index:
    tmp = tmp_path_factory.mktemp("arm-index")
    python = arm.tools.python
    paths = [Path(wheels[k]["path"]) for k in ("glue", "kernel")]
    with clock.phase("verify", f"{CELL} --gates {GATES} (abi natively, import under qemu)"):
        verified = faforge(
            "verify",
            *paths,
            "--gates",
            GATES,
            "--against",
            arm.tools.torch_site,
            "--manifest",
            tmp / "verification",
            "--qemu",
            python.qemu,
            "--sysroot",
            python.sysroot,
            "--target-python",
            python.python,
            "--json",
        )
    assert verified.stdout.strip(), verified.stderr[-3000:]
    with clock.phase("publish", f"{CELL} --require {GATES}"):
        published = faforge(
            "publish",
            *paths,
            "--index",
            tmp / "wheels",
            "--manifest",
            tmp / "verification",
            "--require",
            GATES,
            "--json",
        )
    assert published.stdout.strip(), published.stderr[-3000:]
    return Index(tmp / "wheels", json.loads(verified.stdout), json.loads(published.stdout))


def test_every_gate_passed_and_both_wheels_are_in_the_cells_index(arm, index):
    results = {(r["package"].split("-")[0], r["gate"]): (r["result"], r["detail"]) for r in index.verify["results"]}
    assert {k: v[0] for k, v in results.items()} == {
        (w, g): "passed" for w in ("flash_attn", "libflash_attn_kernels") for g in ("abi", "import")
    }, results
    assert (
        "emulated: qemu-aarch64-static" in results["flash_attn", "import"][1]
        and f"torch {TORCH}+cu130 on aarch64" in results["flash_attn", "import"][1]
    )
    assert "libcudart" in results["libflash_attn_kernels", "import"][1], (
        "the kernel library was loaded beside the CUDA runtime"
    )
    index_name = arm.build.cell.index_name
    assert [(p["action"], p["indexes"]) for p in index.publish["packages"]] == [("published", [index_name])] * 2, (
        index.publish
    )
    assert index.publish["index_problems"] == []
    for project in (FLASH_ATTN.package, FLASH_ATTN.kernel_package):
        assert (index.root / index_name / project / "index.html").is_file(), project


@pytest.fixture(scope="module")
def base(index):
    """ROOT served as the README serves it: python -m http.server on loopback; http://127.0.0.1:PORT/."""
    with serve_directory(index.root) as url:
        yield url


# ------------------------------------------------------------------------------------------------- real pip, real uv


@dataclass(frozen=True)
class Installed:
    python: Path  # the venv's bin/python (aarch64)
    log: str  # the installer's output
    changes: dict[str, set[str]]  # '+' installed, '-' removed, '~' reinstalled: project==version


def _changes_of_pip(report: dict) -> dict[str, set[str]]:
    return {
        "+": {f"{i['metadata']['name']}=={i['metadata']['version']}" for i in report["install"]},
        "-": set(),
        "~": set(),
    }


def _changes_of_uv(log: str) -> dict[str, set[str]]:
    changes = {"+": set(), "-": set(), "~": set()}
    for line in log.splitlines():
        match = re.fullmatch(r"\s*([+~-]) (\S+==\S+)", line)
        if match:
            changes[match[1]].add(match[2])
    return changes


def _projects(changes: set[str]) -> set[str]:
    return {c.split("==")[0] for c in changes}


@pytest.fixture(scope="module")
def pip_venv(arm, base, tmp_path_factory, clock) -> Installed:
    tmp, build = tmp_path_factory.mktemp("arm-pip"), arm.build
    with clock.phase("pip", "aarch64 venv of the torch site and its own pip (hardlinks)"):
        python = arm64_venv(arm.tools.python, tmp / "venv", arm.tools.torch_site)
        install_pip(arm.tools.python, python)
    with clock.phase("pip", f"install flash-attn=={build.glue_version} from the loopback index, under qemu"):
        run = run_emulated(
            arm,
            python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--report",
            tmp / "report.json",
            "--index-url",
            f"{base}{build.cell.index_name}/",
            "--only-binary=:all:",
            f"torch=={TORCH}",
            f"{FLASH_ATTN.package}=={build.glue_version}",
        )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return Installed(python, run.stdout + run.stderr, _changes_of_pip(json.loads((tmp / "report.json").read_text())))


def uv_env() -> dict:
    return {**os.environ, "UV_CACHE_DIR": str(cache_dir("uv")), "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CONFIG": "1"}


def uv_install(arm: Arm, site: Path, base: str, *requirements: str, dry_run: bool) -> subprocess.CompletedProcess:
    """`uv pip install --target SITE` for the emulated machine, our index the extra index (as in doctor's uv line)."""
    return subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            *(["--dry-run"] if dry_run else []),
            "--python",
            sys.executable,
            "--target",
            str(site),
            "--python-platform",
            f"aarch64-manylinux_{glibc(arm).replace('.', '_')}",
            "--python-version",
            arm.build.cell.python,
            "--extra-index-url",
            f"{base}{arm.build.cell.index_name}/",
            "--only-binary",
            ":all:",
            *requirements,
        ],
        capture_output=True,
        text=True,
        env=uv_env(),
        timeout=1800,
        check=False,
    )


@pytest.fixture(scope="module")
def uv_venv(arm, base, tmp_path_factory, clock) -> Installed:
    tmp, build = tmp_path_factory.mktemp("arm-uv"), arm.build
    wanted = (f"torch=={TORCH}", f"{FLASH_ATTN.package}=={build.glue_version}")
    with clock.phase(
        "uv", f"dry run, then install flash-attn=={build.glue_version} (--target the aarch64 venv's site-packages)"
    ):
        python = arm64_venv(arm.tools.python, tmp / "venv", arm.tools.torch_site)
        planned = uv_install(arm, tmp / "venv" / SITE, base, *wanted, dry_run=True)
        assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
        plan = _changes_of_uv(planned.stderr)
        touched = _projects(plan["+"] | plan["-"] | plan["~"])
        assert "torch" not in touched, f"uv would change the installed torch: {plan}"
        assert touched <= {FLASH_ATTN.package, FLASH_ATTN.kernel_package} | ALSO_INSTALLED | REINSTALLED_BY_UV, plan
        run = uv_install(arm, tmp / "venv" / SITE, base, *wanted, dry_run=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return Installed(python, run.stdout + run.stderr, _changes_of_uv(run.stderr))


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_the_installer_adds_our_two_wheels_and_keeps_the_installed_torch(arm, installer, request):
    installed: Installed = request.getfixturevalue(f"{installer}_venv")
    build = arm.build
    ours = {f"{FLASH_ATTN.package}=={build.glue_version}", f"{FLASH_ATTN.kernel_package}=={build.kernel_wheel_version}"}
    assert ours <= installed.changes["+"], installed.log[-3000:]
    assert _projects(installed.changes["+"] - ours) <= ALSO_INSTALLED, installed.changes
    assert "torch" not in _projects(installed.changes["-"] | installed.changes["~"]), installed.changes
    assert _projects(installed.changes["-"] | installed.changes["~"]) <= REINSTALLED_BY_UV, installed.changes
    if installer == "pip":
        assert f"Requirement already satisfied: torch=={TORCH}" in installed.log, (
            "pip's resolver saw the installed torch"
        )
        assert re.search(r"Downloading http://127\.0\.0\.1:\d+/files/flash_attn-", installed.log), (
            "from the loopback index"
        )


def test_uv_refuses_a_wrong_torch_and_an_index_without_the_kernel_wheel(arm, index, base, tmp_path):
    """Resolver errors, found by a dry run (nothing is downloaded): the glue beside torch 2.10, and the glue from an
    index whose kernel wheel is missing (the index as published, less libflash-attn-kernels)."""
    site = tmp_path / "site"
    subprocess.run(["cp", "-al", f"{arm.tools.torch_site}/.", str(site)], check=True)
    glue = f"{FLASH_ATTN.package}=={arm.build.glue_version}"
    wrong = uv_install(arm, site, base, "torch==2.10.0", glue, dry_run=True)
    assert wrong.returncode == 1 and "torch" in wrong.stderr and "unsatisfiable" in wrong.stderr, wrong.stderr[-2000:]
    partial = tmp_path / "wheels"
    shutil.copytree(
        index.root, partial, ignore=shutil.ignore_patterns(f"{FLASH_ATTN.kernel_package}", "libflash_attn_kernels-*")
    )
    with serve_directory(partial) as other:
        missing = uv_install(arm, site, other, glue, dry_run=True)
    assert missing.returncode == 1 and FLASH_ATTN.kernel_package in missing.stderr, missing.stderr[-2000:]


# ------------------------------------------------------------------------------------------------- import, doctor


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_torch_flash_attn_and_the_extension_import_under_qemu_from_the_venv(arm, installer, request, clock):
    installed: Installed = request.getfixturevalue(f"{installer}_venv")
    venv = installed.python.parents[1]
    with clock.phase("import", f"{installer} venv: import torch, flash_attn, {FLASH_ATTN.extension} under qemu"):
        run = run_emulated(arm, installed.python, "-I", "-c", IMPORT)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    assert facts["torch"] == f"{TORCH}+cu130"
    assert facts["flash_attn"].startswith(str(venv)) and facts["extension"] == str(venv / SITE / EXTENSION)
    assert elf.read_info(facts["extension"]).machine == "aarch64"
    mapped = {Path(p).name: p for p in facts["maps"]}
    for library in (FLASH_ATTN.kernel_soname, "libcudart.so.13", "libc10.so"):
        assert library in mapped and mapped[library].startswith(str(venv.resolve())), (library, mapped.get(library))


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_doctor_finds_the_venv_healthy_for_its_torch(arm, installer, base, request, clock):
    installed: Installed = request.getfixturevalue(f"{installer}_venv")
    python = arm.tools.python
    with clock.phase("doctor", f"{installer} venv (probe under qemu)"):
        run = faforge(
            "doctor",
            "--python",
            installed.python,
            "--json",
            timeout=1800,
            env={
                "FAFORGE_QEMU": str(python.qemu),
                "FAFORGE_SYSROOT": str(python.sysroot),
                "FAFORGE_DOCTOR_TIMEOUT": "1500",
                "FAFORGE_PIP_INDEX": base.rstrip("/"),
            },
        )
    assert run.stdout.strip(), run.stderr[-3000:]
    report = json.loads(run.stdout)
    assert report["healthy"] is True and run.returncode == 0, report["problems"]
    assert [p for p in report["problems"] if p["severity"] == "error"] == [] and report["fixes"] == [], report[
        "problems"
    ]
    facts = report["facts"]
    assert (facts["system"]["machine"], facts["python"]["environment"]) == ("aarch64", "venv")
    assert (facts["torch"]["version"], facts["torch"]["cuda"], facts["torch"]["cxx11_abi"]) == (TORCH, "13.0", 1), (
        "the installed torch, kept"
    )
    assert facts["flash_attn"]["version"] == arm.build.glue_version and facts["import"]["ok"] is True
    assert facts["abi_gate"]["ok"] is True, facts["abi_gate"]["problems"]
