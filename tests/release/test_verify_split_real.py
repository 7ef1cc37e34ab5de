"""`faforge verify` on a real split pair (the split build): the build script compiles the kernel library with
nvcc (--kernels-only, sm_90, against the torch shim) and the glue against torch 2.14.1
(--kernel-library), both packaged as .conda files as the two-output recipe lays them out, then
verified in a clean environment with PyPI's torch 2.14.1 (from local disk here).

The glue gets the RUNPATH rattler-build's relink step gives an ELF file under
lib/python3.X/site-packages: $ORIGIN/../.., the prefix's lib/ (https://prefix-dev.github.io/rattler-build/latest/internals/,
"Making packages relocatable"). Slow: two nvcc/g++ builds, and on first use `faforge verify`
installs PyPI torch 2.14.1 and PyPI's CUDA 13.0 runtime into the test cache (as test_end_to_end does).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest
from rattler.package_streaming import extract

from faforge.channel.local import PackageSpec, assemble
from faforge.release.package import read_package
from tests.recipe.test_build_script_real import _run, _tiny_sdist, build_python  # noqa: F401  (fixture)
from tests.support.cache import cache_dir
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

pytestmark = pytest.mark.slow

VERSION = "0.0.1"
KERNEL_BUILD = "cu130_sm90_philox64_h1a2b3c4_0"
FLASH_ATTN_BUILD = "py311_torch2_14_cu130_cxx11abi1_h7654321_0"
# The cell's run requirements as the recipe renders them (einops: the cached verify venv's extra).
DEPENDS = (
    "python 3.11.*",
    "pytorch >=2.14.1,<2.15 cuda130*",
    "einops",
    f"libflash-attn-kernels =={VERSION} {KERNEL_BUILD}",
)
SITE = "lib/python3.11/site-packages/"
# Where `faforge verify` keeps its venvs for these tests (shared with test_end_to_end: torch 2.14.1, py3.11).
VERIFY_CACHE = cache_dir("faforge")


def faforge(*args):
    env = dict(os.environ, FAFORGE_CACHE_DIR=str(VERIFY_CACHE))
    return subprocess.run(
        [sys.executable, "-m", "faforge", *map(str, args)], capture_output=True, text=True, env=env, timeout=1800
    )


def results(run) -> dict[tuple[str, str], dict]:
    assert run.stdout.strip(), run.stderr[-3000:]
    return {(r["package"], r["gate"]): r for r in json.loads(run.stdout)["results"]}


def kernel_files(library: bytes) -> dict[str, bytes]:
    """The kernel package's lib/: the library under its SONAME (the glue's DT_NEEDED) and its link name."""
    return {"lib/libflash_attn_kernels.so.1": library, "lib/libflash_attn_kernels.so": library}


@pytest.fixture(scope="module")
def split_pair(build_python, tmp_path_factory):  # noqa: F811 (an imported fixture, requested by name)
    """(kernel package, flash-attn package), side by side in out/linux-64/, built for real."""
    python, env = build_python
    tmp = tmp_path_factory.mktemp("split")
    src = _tiny_sdist(tmp / "lib")
    kernels_only = {k: v for k, v in env.items() if k != "PYTHONPATH"}  # no torch anywhere on its path
    built = _run(
        (python, kernels_only), src, "1", tmp / "lib", "--kernels-only", "--install-lib-dir", str(tmp / "prefix/lib")
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    library = tmp / "prefix/lib/libflash_attn_kernels.so"
    glue_built = _run(build_python, _tiny_sdist(tmp / "glue"), "1", tmp / "glue", "--kernel-library", str(library))
    assert glue_built.returncode == 0, (glue_built.stdout + glue_built.stderr)[-4000:]
    with zipfile.ZipFile(next((tmp / "glue/dist-abi1").glob("flash_attn-0.0.1-*.whl"))) as wheel:
        members = {
            name: wheel.read(name) for name in wheel.namelist() if name.startswith(("flash_attn/", "flash_attn_2_cuda"))
        }
    glue_name = next(n for n in members if n.endswith(".so"))
    glue = tmp / glue_name
    glue.write_bytes(members[glue_name])
    subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../..", str(glue)], check=True)
    members[glue_name] = glue.read_bytes()
    out = tmp / "out"
    kernels = assemble(
        PackageSpec(
            "libflash-attn-kernels",
            VERSION,
            KERNEL_BUILD,
            "linux-64",
            depends=("cuda-version >=13.0,<14",),
            files=kernel_files(library.read_bytes()),
        ),
        out,
    )
    flash_attn = assemble(
        PackageSpec(
            "flash-attn",
            VERSION,
            FLASH_ATTN_BUILD,
            "linux-64",
            depends=DEPENDS,
            files={SITE + name: data for name, data in members.items()},
        ),
        out,
    )
    return kernels, flash_attn


def test_kernel_package_passes_its_own_abi_and_import_gates(split_pair, tmp_path):
    kernels, _ = split_pair
    run = faforge("verify", kernels, "--manifest", tmp_path / "v", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    got = results(run)
    abi, imported = got[(kernels.name, "abi")], got[(kernels.name, "import")]
    assert (
        abi["result"] == "passed"
        and "is torch-free" in abi["detail"]
        and "GPU code sm_90 = arch list 90" in abi["detail"]
    )
    assert imported["result"] == "passed" and "nvidia-cuda-runtime==13.0.*" in imported["detail"], imported
    # publish reads those results like any package's: the gpu gate (run through a flash-attn) is still missing.
    refused = faforge("publish", kernels, "--manifest", tmp_path / "v", "--to", tmp_path / "channel")
    assert refused.returncode == 1 and "gpu: not run" in refused.stdout, refused.stdout + refused.stderr
    cpu_only = faforge(
        "publish", kernels, "--manifest", tmp_path / "v", "--to", tmp_path / "channel", "--require", "abi,import"
    )
    assert cpu_only.returncode == 0 and (tmp_path / "channel/linux-64" / kernels.name).is_file(), (
        cpu_only.stdout + cpu_only.stderr
    )


def test_flash_attn_passes_with_its_kernel_package_beside_or_given(split_pair, tmp_path):
    kernels, flash_attn = split_pair
    run = faforge("verify", flash_attn, "--manifest", tmp_path / "v", "--json")
    assert run.returncode == 0, run.stdout + run.stderr
    got = results(run)
    assert got[(flash_attn.name, "abi")]["detail"].endswith(f"with libflash_attn_kernels.so from {kernels.name}")
    assert (
        got[(flash_attn.name, "import")]["result"] == "passed"
        and kernels.name in got[(flash_attn.name, "import")]["detail"]
    )
    # Copied away from its kernel package: the lookup fails before any gate (exit 2) ...
    alone = tmp_path / "alone" / flash_attn.name
    alone.parent.mkdir()
    shutil.copy(flash_attn, alone)
    missing = faforge("verify", alone, "--manifest", tmp_path / "v")
    assert missing.returncode == 2 and kernels.name in missing.stderr and "pass it too" in missing.stderr
    # ... and given as an argument it is found there.
    given = faforge("verify", alone, kernels, "--gates", "import", "--manifest", tmp_path / "v", "--json")
    assert given.returncode == 0, given.stdout + given.stderr


def test_flash_attn_whose_kernel_library_lacks_its_launch_fails(split_pair, build_python, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    """A kernel package of the pinned name whose library specialises another head dim: the glue's
    run_mha_fwd_<float, 32, false> is missing, and both the ABI gate and the import say so."""
    python, env = build_python
    _, flash_attn = split_pair
    src = _tiny_sdist(tmp_path / "lib")
    kernel = src / "csrc/flash_attn/src/flash_fwd_tiny_sm80.cu"
    kernel.write_text(kernel.read_text().replace("<float, 32, false>", "<float, 64, false>"))
    built = _run(
        (python, {k: v for k, v in env.items() if k != "PYTHONPATH"}), src, "1", tmp_path / "lib", "--kernels-only"
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    library = tmp_path / "lib/build-abi1/kernels/libflash_attn_kernels.so"
    out = tmp_path / "out"
    assemble(
        PackageSpec(
            "libflash-attn-kernels",
            VERSION,
            KERNEL_BUILD,
            "linux-64",
            depends=("cuda-version >=13.0,<14",),
            files=kernel_files(library.read_bytes()),
        ),
        out,
    )
    shutil.copy(flash_attn, out / "linux-64" / flash_attn.name)
    run = faforge("verify", out / "linux-64" / flash_attn.name, "--manifest", tmp_path / "v", "--json")
    assert run.returncode == 1, run.stdout + run.stderr
    got = results(run)
    abi, imported = got[(flash_attn.name, "abi")], got[(flash_attn.name, "import")]
    assert abi["result"] == "failed" and "run_mha_fwd_" in abi["detail"], abi
    assert imported["result"] == "failed" and "undefined symbol" in imported["detail"], imported


def test_flash_attn_abi_gate_still_fails_against_another_torch(split_pair, tmp_path):
    _, flash_attn = split_pair
    try:
        other = torch_env("2.13.0")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    run = faforge(
        "verify", flash_attn, "--gates", "abi", "--against", other.torch_lib, "--manifest", tmp_path / "v", "--json"
    )
    assert run.returncode == 1, run.stdout + run.stderr
    abi = results(run)[(flash_attn.name, "abi")]
    assert abi["result"] == "failed" and "torch 2.13.0" in abi["detail"], abi


def test_kernel_package_gpu_gate_runs_through_its_flash_attn(split_pair, tmp_path):
    """No GPU here: the suite skips, and both packages record that one run as skipped, never passed."""
    kernels, flash_attn = split_pair
    run = faforge("verify", kernels, flash_attn, "--gates", "gpu", "--manifest", tmp_path / "v", "--json")
    got = results(run)
    kernel_gpu, flash_attn_gpu = got[(kernels.name, "gpu")], got[(flash_attn.name, "gpu")]
    assert kernel_gpu["detail"] == f"the GPU suite through {flash_attn.name}: {flash_attn_gpu['detail']}"
    assert kernel_gpu["result"] == flash_attn_gpu["result"]
    if kernel_gpu["result"] == "passed":
        assert run.returncode == 0
    else:
        assert kernel_gpu["result"] == "skipped" and run.returncode == 3, run.stdout + run.stderr
    assert read_package(kernels).cell_id is None


def test_a_flash_attn_carrying_its_kernel_library_under_another_name_fails_its_abi_gate(split_pair, tmp_path):
    """The glue needs libflash_attn_kernels.so.1 (the SONAME); a package that carries the library only as
    libflash_attn_kernels.so does not load (the aarch64 cross test's package, seen under qemu). The abi
    gate must say so, not pass with the library 'unverified'."""
    kernels, flash_attn = split_pair

    extract(flash_attn, tmp_path / "glue")
    extract(kernels, tmp_path / "kernels")
    files = {
        str(p.relative_to(tmp_path / "glue")): p.read_bytes()
        for p in (tmp_path / "glue").rglob("*")
        if p.is_file() and "info" not in p.relative_to(tmp_path / "glue").parts
    }
    files["lib/libflash_attn_kernels.so"] = (tmp_path / "kernels/lib/libflash_attn_kernels.so.1").read_bytes()
    carrying = assemble(
        PackageSpec("flash-attn", VERSION, FLASH_ATTN_BUILD, "linux-64", depends=DEPENDS[:3], files=files),
        tmp_path / "out",
    )
    run = faforge("verify", carrying, "--gates", "abi", "--manifest", tmp_path / "v", "--json")
    abi = results(run)[(carrying.name, "abi")]
    assert run.returncode == 1 and abi["result"] == "failed" and "libflash_attn_kernels.so.1" in abi["detail"], abi
