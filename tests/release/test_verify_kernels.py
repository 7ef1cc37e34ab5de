"""`faforge verify` on the split packages (the split build), without building kernels: a flash-attn that pins
a kernel build needs that exact kernel package (given, or beside it), else exit 2; a kernel package's
gates are its own (faforge.release.verify.gates). Packages are real .conda files assembled with
py-rattler-build; the "libraries" are real ELF files compiled with g++ here.
tests/release/test_verify_split_real.py runs the gates on a real nvcc-built pair."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.channel.local import PackageSpec, assemble, index
from faforge.release.manifest import results_for
from faforge.release.package import facts_from_metadata, read_package

VERSION = "2.8.3.post2"
KERNEL_BUILD = "cu130_sm90_philox64_h1a2b3c4_0"
KERNEL_FILE = f"libflash-attn-kernels-{VERSION}-{KERNEL_BUILD}.conda"
FLASH_ATTN_BUILD = "py312_torch2_13_cu130_cxx11abi1_h7654321_0"


def faforge(*args, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def kernel_package(
    directory: Path, build: str = KERNEL_BUILD, library: bytes = b"\x7fELF stand-in", subdir: str = "linux-64"
) -> Path:
    return assemble(
        PackageSpec(
            "libflash-attn-kernels",
            VERSION,
            build,
            subdir,
            depends=("cuda-version >=13.0,<14",),
            files={"lib/libflash_attn_kernels.so": library},
        ),
        directory,
    )


def split_flash_attn(directory: Path, kernel_build: str = KERNEL_BUILD, subdir: str = "linux-64") -> Path:
    return assemble(
        PackageSpec(
            "flash-attn",
            VERSION,
            FLASH_ATTN_BUILD,
            subdir,
            depends=(
                "python 3.12.*",
                "pytorch >=2.13.0,<2.14 cuda130*",
                f"libflash-attn-kernels =={VERSION} {kernel_build}",
            ),
        ),
        directory,
    )


def facts(build: str):
    return facts_from_metadata(
        path=Path("k.conda"),
        name="libflash-attn-kernels",
        version=VERSION,
        build=build,
        subdir="linux-64",
        depends=(),
        sha256="0" * 64,
    )


def test_kernel_build_strings_name_cuda_and_arch_list():
    cu130 = facts("cu130_sm80_90_100_120ptx_philox64_h1a2b3c4_0")
    assert (cu130.cuda, cu130.cuda_archs) == ("13.0", "80;90;100;120+PTX")
    philox = facts("cu129_sm80_90ptx_philox32_h1a2b3c4_1")
    assert (philox.cuda, philox.cuda_archs, philox.python, philox.cell_id) == ("12.9", "80;90+PTX", None, None)
    # not the recipe's spelling (no layout tag, or none at all): no arch list to judge its GPU code by
    assert facts("cu130_sm80_90_100_120ptx_h1a2b3c4_0").cuda_archs is None
    assert facts("h1a2b3c4_0").cuda_archs is None


def test_a_split_flash_attn_without_its_kernel_package_is_exit_2(tmp_path):
    fa = split_flash_attn(tmp_path / "out")
    manifest = tmp_path / "v"
    result = faforge("verify", fa, "--manifest", manifest)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"{fa.name}: needs its kernel package" in result.stderr and KERNEL_FILE in result.stderr
    assert "pass it too" in result.stderr
    assert not results_for(manifest, read_package(fa).sha256), "a usage error records no gate"
    as_json = faforge("verify", fa, "--manifest", manifest, "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["error"]["kind"] == "bad-input"


def test_a_kernel_package_of_another_build_is_not_picked_up(tmp_path):
    fa = split_flash_attn(tmp_path / "out")
    other = kernel_package(tmp_path / "elsewhere", build="cu130_sm90_philox64_h9999999_0")
    result = faforge("verify", fa, other, "--gates", "abi", "--manifest", tmp_path / "v")
    assert result.returncode == 2 and KERNEL_FILE in result.stderr, result.stdout + result.stderr
    # Named as the pinned file but holding another build: refused, not trusted by its name.
    shutil.copy(other, fa.parent / KERNEL_FILE)
    renamed = faforge("verify", fa, "--gates", "abi", "--manifest", tmp_path / "v")
    assert (
        renamed.returncode == 2
        and "its metadata says libflash-attn-kernels 2.8.3.post2 cu130_sm90_philox64_h9999999_0 (linux-64)"
        in renamed.stderr
    )


def test_the_kernel_package_is_found_among_the_arguments_or_beside(tmp_path):
    """linux-aarch64 packages on this machine: every gate that needs a torch is skipped at once, not
    refused, so the lookup succeeded (and no torch is installed for it)."""
    fa = split_flash_attn(tmp_path / "out", subdir="linux-aarch64")
    given = kernel_package(tmp_path / "elsewhere", subdir="linux-aarch64")
    with_argument = faforge("verify", fa, given, "--gates", "import", "--manifest", tmp_path / "v", "--json")
    assert with_argument.returncode == 3, with_argument.stdout + with_argument.stderr
    results = {r["package"]: r for r in json.loads(with_argument.stdout)["results"]}
    assert results[fa.name]["detail"].startswith("not run: ")  # no qemu or aarch64 Python here (test_verify_foreign.py)
    assert "library cannot be loaded on this" in results[given.name]["detail"]
    beside = kernel_package(tmp_path / "out", subdir="linux-aarch64")
    assert beside.parent == fa.parent
    alone = faforge("verify", fa, "--gates", "gpu", "--manifest", tmp_path / "v")
    assert alone.returncode == 3, alone.stdout + alone.stderr
    # A flash-attn of another platform does not take a linux-64 kernel package of the pinned build.
    solo = split_flash_attn(tmp_path / "solo", subdir="linux-aarch64")
    other_platform = faforge(
        "verify", solo, kernel_package(tmp_path / "x64"), "--gates", "gpu", "--manifest", tmp_path / "v"
    )
    assert other_platform.returncode == 2 and KERNEL_FILE in other_platform.stderr


def test_a_kernel_package_that_holds_no_shared_library_fails_its_abi_gate(tmp_path):
    kernels = kernel_package(tmp_path / "out")
    result = faforge("verify", kernels, "--gates", "abi", "--manifest", tmp_path / "v", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    [entry] = json.loads(result.stdout)["results"]
    assert entry["result"] == "failed" and "lib/libflash_attn_kernels.so" in entry["detail"] and entry["cell"] is None


def test_a_kernel_build_string_without_arch_list_is_skipped_not_passed(tmp_path):
    kernels = kernel_package(tmp_path / "out", build="h1a2b3c4_0")
    result = faforge("verify", kernels, "--gates", "abi", "--manifest", tmp_path / "v")
    assert result.returncode == 3 and "names no arch list" in result.stdout + result.stderr


def test_a_kernel_package_gpu_gate_needs_a_flash_attn_that_pins_it(tmp_path):
    kernels = kernel_package(tmp_path / "out")
    result = faforge("verify", kernels, "--gates", "gpu", "--manifest", tmp_path / "v", "--json")
    assert result.returncode == 3
    [entry] = json.loads(result.stdout)["results"]
    assert entry["result"] == "skipped" and "runs only through a flash-attn that pins this build" in entry["detail"]


TORCH_USING_LIBRARY = r"""
namespace c10 { namespace cuda { void SetDevice(signed char, bool); } }
namespace flash { struct Flash_fwd_params;
template<typename T, int D, bool C> void run_mha_fwd_(Flash_fwd_params&, void*);
template<> void run_mha_fwd_<float, 32, false>(Flash_fwd_params&, void*) { c10::cuda::SetDevice(0, false); } }
"""


@pytest.mark.slow  # a g++ compile
def test_a_kernel_library_importing_a_torch_symbol_fails_its_abi_gate(tmp_path):
    """A real shared library (g++) whose launch calls c10::cuda::SetDevice: the torch-free check names it."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    source = tmp_path / "kernels.cpp"
    source.write_text(TORCH_USING_LIBRARY)
    library = tmp_path / "libflash_attn_kernels.so"
    subprocess.run(
        ["g++", "-shared", "-fPIC", "-Wl,-soname,libflash_attn_kernels.so", str(source), "-o", str(library)], check=True
    )
    kernels = kernel_package(tmp_path / "out", library=library.read_bytes())
    result = faforge("verify", kernels, "--gates", "abi", "--manifest", tmp_path / "v", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    [entry] = json.loads(result.stdout)["results"]
    assert entry["result"] == "failed"
    assert "torch-symbol: c10::cuda::SetDevice(signed char, bool)" in entry["detail"]
    assert "gpu-archs" in entry["detail"], "a CPU-only library carries none of its arch list"


def test_the_kernel_package_is_fetched_from_the_kernel_channel(tmp_path):
    """A cell whose kernel package an earlier run published: verify downloads it from that channel
    (a real file:// channel, indexed by py-rattler), checked against the repodata's sha256, into the cache."""
    fa = split_flash_attn(tmp_path / "out", subdir="linux-aarch64")
    channel = tmp_path / "channel"
    published = kernel_package(channel, subdir="linux-aarch64")
    index(channel)
    cache = {"FAFORGE_CACHE_DIR": str(tmp_path / "cache")}
    fetched = faforge(
        "verify", fa, "--gates", "gpu", "--kernel-channel", channel, "--manifest", tmp_path / "v", env=cache
    )
    assert fetched.returncode == 3, fetched.stdout + fetched.stderr
    cached = tmp_path / "cache" / "kernel-packages" / "linux-aarch64" / KERNEL_FILE
    assert cached.read_bytes() == published.read_bytes()
    # a channel without that build: exit 2 naming it; an empty value is refused before any work
    empty = tmp_path / "empty"
    kernel_package(empty, build="cu130_sm90_philox64_h9999999_0", subdir="linux-aarch64")
    index(empty)
    missing = faforge(
        "verify", fa, "--gates", "gpu", "--kernel-channel", empty, "--manifest", tmp_path / "v", env=cache
    )
    assert (
        missing.returncode == 2
        and "holds no libflash-attn-kernels 2.8.3.post2 cu130_sm90_philox64_h1a2b3c4_0 for linux-aarch64"
        in missing.stderr
    )
    # the channel's file changed after indexing: the sha256 no longer matches, nothing is cached
    cached.unlink()
    published.write_bytes(published.read_bytes() + b"tampered")
    tampered = faforge(
        "verify", fa, "--gates", "gpu", "--kernel-channel", channel, "--manifest", tmp_path / "v", env=cache
    )
    assert tampered.returncode == 4 and "does not have the sha256 its repodata says" in tampered.stderr, tampered.stderr
    assert not cached.exists() and "Traceback" not in tampered.stderr
    # the file is gone from the channel that still lists it: a remote failure (exit 4) naming its URL
    published.unlink()
    gone = faforge("verify", fa, "--gates", "gpu", "--kernel-channel", channel, "--manifest", tmp_path / "v", env=cache)
    assert gone.returncode == 4 and published.name in gone.stderr and "Traceback" not in gone.stderr, gone.stderr
    assert "PyPI" not in gone.stderr, "the hint is about this channel, not PyPI"
    assert not cached.exists(), gone.stderr
