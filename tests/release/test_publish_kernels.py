"""`faforge publish` never ships a flash-attn without the exact kernel package it pins
(libflash-attn-kernels, the split build): real .conda files assembled with py-rattler-build, published to a
real file:// channel folder and read back through its repodata."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from faforge.channel.local import PackageSpec, assemble
from faforge.release.manifest import record
from faforge.release.package import read_package

VERSION = "2.8.3.post2"
KERNEL_BUILD = "cu130_sm80_90_100_120ptx_philox64_h1a2b3c4_0"
KERNEL_FILE = f"libflash-attn-kernels-{VERSION}-{KERNEL_BUILD}.conda"


def kernel_package(directory: Path, build: str = KERNEL_BUILD) -> Path:
    return assemble(
        PackageSpec(
            "libflash-attn-kernels",
            VERSION,
            build,
            "linux-64",
            depends=("cuda-version >=13.0,<14",),
            files={"lib/libflash_attn_kernels.so": b"\x7fELF stand-in"},
        ),
        directory,
    )


def flash_attn(directory: Path, python: str = "3.12", kernel_build: str = KERNEL_BUILD) -> Path:
    build = f"py{python.replace('.', '')}_torch2_13_cu130_cxx11abi1_h7654321_0"
    return assemble(
        PackageSpec(
            "flash-attn",
            VERSION,
            build,
            "linux-64",
            depends=(f"python {python}.*", f"libflash-attn-kernels =={VERSION} {kernel_build}"),
            files={"share/flash-attn-standin.txt": python},
        ),
        directory,
    )


def passed(manifest: Path, *paths: Path, result: str = "passed") -> None:
    for path in paths:
        for gate in ("abi", "import", "gpu"):
            record(manifest, read_package(path), gate, result, "test")


def publish(*args):
    return subprocess.run(
        [sys.executable, "-m", "faforge", "publish", *map(str, args)], capture_output=True, text=True, timeout=600
    )


@pytest.fixture
def built(tmp_path):
    out = tmp_path / "built"
    kernels, fa312 = kernel_package(out), flash_attn(out)
    manifest = tmp_path / "verification"
    passed(manifest, kernels, fa312)
    return tmp_path, manifest, kernels, fa312


def test_a_flash_attn_alone_is_refused_naming_its_kernel_package(built):
    tmp_path, manifest, _, fa312 = built
    channel = tmp_path / "channel"
    result = publish(fa312, "--manifest", manifest, "--to", channel)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith(f"refused {fa312.name}: "))
    assert KERNEL_FILE in line and "together" in line
    assert not (channel / "linux-64" / fa312.name).exists()


def test_published_together_then_a_later_flash_attn_finds_the_kernel_in_the_channel(built):
    tmp_path, manifest, kernels, fa312 = built
    channel = tmp_path / "channel"
    both = publish(fa312, kernels, "--manifest", manifest, "--to", channel)
    assert both.returncode == 0, both.stdout + both.stderr
    assert (channel / "linux-64" / kernels.name).is_file() and (channel / "linux-64" / fa312.name).is_file()
    # A cell built later (another python) against the same kernel package: the channel's repodata has it.
    fa311 = flash_attn(tmp_path / "later", python="3.11")
    passed(manifest, fa311)
    later = publish(fa311, "--manifest", manifest, "--to", channel)
    assert later.returncode == 0, later.stdout + later.stderr
    # One pinning another kernel build (same name and version, another hash; or the other Philox layout,
    # a torch <= 2.9 cell's) is refused all the same.
    for python, other in (
        ("3.13", "cu130_sm80_90_100_120ptx_philox64_h9999999_0"),
        ("3.10", "cu130_sm80_90_100_120ptx_philox32_h1a2b3c4_0"),
    ):
        stray = flash_attn(tmp_path / "stray", python=python, kernel_build=other)
        passed(manifest, stray)
        refused = publish(stray, "--manifest", manifest, "--to", channel)
        assert refused.returncode == 1 and f"libflash-attn-kernels-{VERSION}-{other}.conda" in refused.stdout


def test_a_kernel_package_that_fails_its_gates_takes_its_flash_attn_with_it(built):
    tmp_path, manifest, _, fa312 = built
    broken = assemble(
        PackageSpec(
            "libflash-attn-kernels",
            VERSION,
            KERNEL_BUILD,
            "linux-64",
            files={"lib/libflash_attn_kernels.so": b"\x7fELF another build"},
        ),
        tmp_path / "broken",
    )
    record(manifest, read_package(broken), "abi", "failed", "torch symbol in a kernel library")
    result = publish(fa312, broken, "--manifest", manifest, "--to", tmp_path / "channel")
    assert result.returncode == 1
    assert "in this publish but refused" in result.stdout and "torch symbol" in result.stdout


def test_a_server_target_reads_the_users_channel_given_with_channel(built, tmp_path):
    _, manifest, kernels, fa312 = built
    channel = tmp_path / "channel"
    assert publish(kernels, "--manifest", manifest, "--to", channel).returncode == 0
    target = "prefix:https://prefix.example/faforge"
    blind = publish(fa312, "--manifest", manifest, "--to", target, "--dry-run")
    assert blind.returncode == 1 and KERNEL_FILE in blind.stdout and "--channel" in blind.stdout
    seeing = publish(fa312, "--manifest", manifest, "--to", target, "--dry-run", "--channel", channel.as_uri())
    assert seeing.returncode == 0, seeing.stdout + seeing.stderr
    assert "would-publish" in seeing.stdout
