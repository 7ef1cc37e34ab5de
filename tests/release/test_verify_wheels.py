"""`faforge verify` of wheels (the pip world): the gates of the glue, kernel and FA3 wheels on PyPI's torch.

The wheels are the real ones `faforge wheel` makes in tests/pipwheel/test_real_wheels.py (the conda world's kernel
package repacked, the tiny sdist's glue built against PyPI's torch 2.14.1, the FA3 canary repacked; its fixtures,
built once per module). The torches are the cached base venvs faforge.release.clean_env makes in the test cache
(tests/conda_world's verify runs made torch 2.11.0 and 2.5.1 for Python 3.12; torch 2.14.1 for 3.11): nothing here
downloads a torch. pip is real pip, reading a loopback index over HTTP; a failure is one for a real reason: a
glue against another torch minor (signature drift) or the other C++ ABI, a RUNPATH that misses the kernel
wheel's folder or the CUDA runtime's, a torch requirement pip could only meet by replacing torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.family import FLASH_ATTN
from faforge.pipwheel.facts import read_wheel, wheel_contents
from faforge.pipwheel.patch import set_runpath
from faforge.pipwheel.writer import WheelSpec, write_wheel
from tests.conda_world.conftest import build_in_world, cu130_kernel_package, sdist, world  # noqa: F401 (fixtures behind the real wheels)
from tests.pipwheel.test_real_wheels import fa3_raw, raw_glue, torch214, unpacked_kernel, wheels  # noqa: F401 (fixtures)
from tests.pipworld.conftest import base_venv
from tests.recipe.test_build_script_real import build_python  # noqa: F401 (fixture: torch 2.14.1 and the build tools)
from tests.support.cache import cache_dir
from tests.support.tiny_wheels import KERNEL_VERSION, SDIST_VERSION, Spec, build_wheel, glue, kernel

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "tests" / "schemas" / "verify.json").read_text())
# Where `faforge verify` keeps its base venvs for the tests (shared with tests/conda_world and test_end_to_end).
VERIFY_CACHE = cache_dir("faforge")
CELL = "pypi/linux-64/py311/torch2.14/cu130/abi1"
EXTENSION = "flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so"


def faforge(*args, timeout: int = 1800) -> subprocess.CompletedProcess:
    env = dict(os.environ, FAFORGE_CACHE_DIR=str(VERIFY_CACHE))
    return subprocess.run(
        [sys.executable, "-m", "faforge", *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout
    )


def gates_of(run: subprocess.CompletedProcess) -> dict[tuple[str, str], dict]:
    assert run.stdout.strip(), run.stderr[-3000:]
    report = json.loads(run.stdout)
    jsonschema.validate(report, SCHEMA)
    return {(r["package"].split("-")[0], r["gate"]): r for r in report["results"]}


def repacked(wheel: Path, out: Path, member: str, runpath: tuple[str, ...]) -> Path:
    """The same wheel with one ELF member's RUNPATH set to `runpath` (patchelf, as faforge.pipwheel sets it)."""
    facts = read_wheel(wheel)
    files = {name: data for name, data in wheel_contents(wheel).items() if ".dist-info/" not in name}
    out.mkdir(parents=True, exist_ok=True)
    (out / "before.so").write_bytes(files[member])
    set_runpath(out / "before.so", out / "after.so", runpath)
    files[member] = (out / "after.so").read_bytes()
    return write_wheel(
        WheelSpec(
            name=facts.name,
            version=facts.version,
            python_tags=facts.python_tags,
            abi_tags=facts.abi_tags,
            platform_tags=facts.platform_tags,
            files=files,
            build_tag=facts.build_tag,
            requires_python=facts.requires_python,
            requires_dist=facts.requires_dist,
        ),
        out,
    )


@pytest.fixture(scope="module")
def real(wheels) -> dict[str, Path]:  # noqa: F811 (the imported fixture, requested by name)
    return {kind: Path(report["wheel"]["path"]) for kind, report in wheels.items()}


@pytest.fixture(scope="module")
def verified(real, tmp_path_factory):
    """One `faforge verify GLUE KERNEL --gates abi,import,gpu` into a manifest, as CI runs it."""
    manifest = tmp_path_factory.mktemp("verified") / "verification"
    run = faforge("verify", real["glue"], real["kernel"], "--gates", "abi,import,gpu", "--manifest", manifest, "--json")
    return run, manifest


# ------------------------------------------------------------------------------------------ the real wheels


@pytest.mark.slow
def test_the_glue_and_kernel_wheels_pass_their_gates_on_pypi_torch(verified, real):
    run, manifest = verified
    gates = gates_of(run)
    glue_abi, glue_import, glue_gpu = (gates["flash_attn", g] for g in ("abi", "import", "gpu"))
    assert glue_abi["result"] == "passed", glue_abi["detail"]
    assert (
        "against torch 2.14.1+cu130 (CUDA 13.0)" in glue_abi["detail"]
        and f"from {real['kernel'].name}" in glue_abi["detail"]
    )
    assert "torch-venvs/torch-2.14.1-py3.11" in glue_abi["detail"], "the cached base venv of the cell's PyPI torch"
    assert glue_import["result"] == "passed", glue_import["detail"]
    assert (
        "imported flash_attn, flash_attn_2_cuda, torch's, "
        "the kernel wheel's and the CUDA runtime's libraries all loaded from the venv"
    ) in glue_import["detail"]
    assert (
        "from the loopback index http://127.0.0.1:" in glue_import["detail"]
        and "/torch2.14-cu130/" in glue_import["detail"]
    )
    assert "torch kept" in glue_import["detail"]
    assert glue_abi["cell"] == CELL, "the matrix's pip cell, read from the wheel's label and tags"
    kernel_gates = {g: gates["libflash_attn_kernels", g] for g in ("abi", "import", "gpu")}
    assert kernel_gates["abi"]["result"] == "passed", kernel_gates["abi"]["detail"]
    assert (
        "GPU code sm_80, sm_90, sm_100, sm_120, compute_120 = arch list 80;90;100;120+PTX"
        in kernel_gates["abi"]["detail"]
    )
    assert kernel_gates["import"]["result"] == "passed", kernel_gates["import"]["detail"]
    assert "nothing preloaded: its RUNPATH finds libcudart in the venv" in kernel_gates["import"]["detail"]
    assert kernel_gates["gpu"]["detail"].startswith(f"the GPU suite through {real['glue'].name}")
    if glue_gpu["result"] == "skipped":  # no GPU on this machine: the suite said so, and the exit status is 3
        assert "no CUDA device" in glue_gpu["detail"] and run.returncode == 3
    else:
        assert glue_gpu["result"] == "passed" and run.returncode == 0, glue_gpu["detail"]
    for wheel in (real["glue"], real["kernel"]):
        sha = read_wheel(wheel).sha256
        assert sorted(p.name for p in (manifest / sha).iterdir()) == ["abi.json", "gpu.json", "import.json"]


@pytest.mark.slow
def test_publish_takes_the_verified_wheels_and_refuses_unverified_ones(verified, real, tmp_path):
    """The gated publish reads the same manifest: by sha256, so an unverified copy is refused."""
    _, manifest = verified
    unverified = faforge(
        "publish",
        real["glue"],
        real["kernel"],
        "--index",
        tmp_path / "index",
        "--manifest",
        tmp_path / "empty",
        "--require",
        "abi,import",
        "--json",
    )
    assert unverified.returncode == 1, unverified.stdout + unverified.stderr
    assert not (tmp_path / "index" / "files").exists() or not list((tmp_path / "index" / "files").glob("*.whl"))
    published = faforge(
        "publish",
        real["glue"],
        real["kernel"],
        "--index",
        tmp_path / "index",
        "--manifest",
        manifest,
        "--require",
        "abi,import",
        "--json",
    )
    actions = (
        {r["package"].split("-")[0]: r for r in json.loads(published.stdout)["packages"]}
        if published.stdout.strip()
        else {}
    )
    assert published.returncode == 0, published.stdout[-2000:] + published.stderr[-2000:]
    assert {k: r["action"] for k, r in actions.items()} == {
        "flash_attn": "published",
        "libflash_attn_kernels": "published",
    }
    assert (tmp_path / "index" / "torch2.14-cu130" / "flash-attn" / "index.html").is_file()


@pytest.mark.slow
def test_a_glue_wheel_checked_against_another_torch_fails_its_abi_gate(real, tmp_path):
    """The cell's torch is 2.14.1; against 2.11.0 a c10 function has another signature, against 2.5.1 (C++ ABI 0)
    std::string is spelled the old way too. The gate reads the real libraries of those PyPI wheels."""
    for torch, python, says in (("2.11.0", "3.12", "signature-drift"), ("2.5.1", "3.12", "pre-C++11 ABI")):
        venv = base_venv(torch, python)
        run = faforge(
            "verify",
            real["glue"],
            real["kernel"],
            "--gates",
            "abi",
            "--against",
            venv.site_packages,
            "--manifest",
            tmp_path / torch,
            "--json",
        )
        gates = gates_of(run)
        assert run.returncode == 1
        abi = gates["flash_attn", "abi"]
        assert (
            abi["result"] == "failed" and says in abi["detail"] and "c10_cuda_check_implementation" in abi["detail"]
        ), abi["detail"]
        assert f"against torch {torch}" in abi["detail"]


@pytest.mark.slow
def test_a_glue_whose_runpath_misses_the_kernel_folder_installs_but_fails_to_import(real, tmp_path):
    """The abi gate is given the kernel wheel's folder, so it passes; the import, in pip's layout, finds no library."""
    broken = repacked(real["glue"], tmp_path / "broken", EXTENSION, ("$ORIGIN/torch/lib", "$ORIGIN/nvidia/cu13/lib"))
    run = faforge("verify", broken, real["kernel"], "--gates", "abi,import", "--manifest", tmp_path / "m", "--json")
    gates = gates_of(run)
    assert gates["flash_attn", "abi"]["result"] == "passed", gates["flash_attn", "abi"]["detail"]
    found = gates["flash_attn", "import"]
    assert found["result"] == "failed", found["detail"]
    assert (
        f"{FLASH_ATTN.kernel_soname}: cannot open shared object file" in found["detail"]
        and "pip installed" in found["detail"]
    )
    assert run.returncode == 1


@pytest.mark.slow
def test_a_kernel_wheel_whose_runpath_misses_the_cuda_runtime_fails_to_load(real, tmp_path):
    """CUDA 12's layout (nvidia/cuda_runtime/lib) for a CUDA 13 library: nothing is preloaded, so the loader finds no
    libcudart.so.13 in pip's layout: none at all, or (a machine with a CUDA toolkit in ld.so.cache, as this one) the
    system's, which the gate names."""
    broken = repacked(
        real["kernel"],
        tmp_path / "broken",
        f"libflash_attn_kernels/{FLASH_ATTN.kernel_soname}",
        ("$ORIGIN/../nvidia/cuda_runtime/lib",),
    )
    run = faforge("verify", broken, "--gates", "abi,import", "--manifest", tmp_path / "m", "--json")
    gates = gates_of(run)
    assert gates["libflash_attn_kernels", "abi"]["result"] == "passed"
    assert gates["libflash_attn_kernels", "import"]["result"] == "failed"
    detail = gates["libflash_attn_kernels", "import"]["detail"]
    assert "libcudart.so.13: cannot open shared object file" in detail or "loaded libcudart.so.13 from /" in detail, (
        detail
    )
    assert run.returncode == 1


@pytest.mark.slow
def test_the_fa3_wheel_is_checked_over_the_torch_range_of_its_indexes(real, tmp_path):
    """cu130, torch>=2.9: the indexes torch2.11-cu130 to torch2.14-cu130 of the pypi world. Both ends checked: passed;
    one end only: skipped, naming the other. The import is pip's, beside PyPI's torch 2.14.1, from the loopback
    index."""
    oldest, newest = base_venv("2.11.0", "3.12"), base_venv("2.14.1", "3.11")
    run = faforge(
        "verify",
        real["fa3"],
        "--gates",
        "abi,import,gpu",
        "--against",
        oldest.site_packages,
        "--against",
        newest.site_packages,
        "--manifest",
        tmp_path / "m",
        "--json",
    )
    gates = gates_of(run)
    abi, imported = gates["flash_attn_3", "abi"], gates["flash_attn_3", "import"]
    assert abi["result"] == "passed" and "serves 2.11 to 2.14" in abi["detail"], abi["detail"]
    assert imported["result"] == "passed", imported["detail"]
    assert (
        "imported flash_attn_3, flash_attn_3._C, flash_attn_interface, "
        "torch's and the CUDA runtime's libraries all loaded"
    ) in imported["detail"]
    assert "/torch2.14-cu130/" in imported["detail"] and "PyPI torch 2.14.1+cu130" in imported["detail"]
    narrow = faforge(
        "verify",
        real["fa3"],
        "--gates",
        "abi",
        "--against",
        newest.site_packages,
        "--manifest",
        tmp_path / "n",
        "--json",
    )
    assert narrow.returncode == 3
    assert "also check torch 2.11 (--against)" in gates_of(narrow)["flash_attn_3", "abi"]["detail"]


# ------------------------------------------------------------------------------------------ small wheels (no build)


def test_a_glue_wheel_needs_its_kernel_wheel_among_the_arguments_or_beside_it(tmp_path):
    lone = build_wheel(glue("2.14", python="311"), tmp_path / "alone")
    run = faforge("verify", lone, "--manifest", tmp_path / "m", "--json")
    assert run.returncode == 2, run.stderr
    error = json.loads(run.stdout)
    jsonschema.validate(error, SCHEMA)
    assert f"needs its kernel wheel libflash-attn-kernels=={KERNEL_VERSION}" in error["error"]["message"]
    assert (
        "neither among the wheels given nor beside it" in error["error"]["message"]
        and "pass it too" in error["error"]["hint"]
    )
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir()), "nothing recorded"


def test_a_glue_wheel_of_no_pip_cell_is_skipped_with_the_reason(tmp_path):
    """torch 2.3 is below the pypi world's floor: no cell, so no torch to install beside; never passed."""
    folder = tmp_path / "w"
    old, beside = build_wheel(glue("2.3", python="312"), folder), build_wheel(kernel(), folder)
    run = faforge("verify", old, "--gates", "abi,import,gpu", "--manifest", tmp_path / "m", "--json")
    gates = gates_of(run)
    assert run.returncode == 3
    assert {gates["flash_attn", g]["result"] for g in ("abi", "import", "gpu")} == {"skipped"}
    assert "no pip cell linux-64/py312/torch2.3/cu130/abi1 in the matrix" in gates["flash_attn", "import"]["detail"]
    assert gates["flash_attn", "abi"]["cell"] is None and beside.is_file()


def test_a_wheel_of_another_project_is_bad_input(tmp_path):
    other = build_wheel(Spec("einops", "0.8.0", "py3-none-any", requires_python=">=3.9"), tmp_path)
    run = faforge("verify", other, "--manifest", tmp_path / "m")
    assert run.returncode == 2 and "a einops wheel, none of the projects faforge verifies" in run.stderr


@pytest.mark.slow
def test_a_glue_wheel_pip_could_install_only_by_replacing_torch_fails_its_import(tmp_path):
    """Requires-Dist wants torch>=2.15, the cell's torch is 2.14.1, pinned: pip's resolver refuses, fetching nothing."""
    base_venv("2.14.1", "3.11")
    folder = tmp_path / "w"
    greedy = build_wheel(
        Spec(
            FLASH_ATTN.dist_name,
            f"{SDIST_VERSION}+torch2.14.cu130.abi1",
            "cp311-cp311-manylinux_2_28_x86_64",
            requires_python=">=3.11,<3.12",
            requires_dist=("torch>=2.15", f"{FLASH_ATTN.kernel_package}=={KERNEL_VERSION}"),
            build="0h1234567",
            package=FLASH_ATTN.module,
        ),
        folder,
    )
    build_wheel(kernel(), folder)
    run = faforge("verify", greedy, "--gates", "import", "--manifest", tmp_path / "m", "--json")
    found = gates_of(run)["flash_attn", "import"]
    assert run.returncode == 1 and found["result"] == "failed", found["detail"]
    assert "pip could not install" in found["detail"] and "conflicting dependencies" in found["detail"], found["detail"]
