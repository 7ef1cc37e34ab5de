"""Debian's CUDA 12.4 for the legacy cell, fetched with a private apt configuration
(tests/support/debian_toolchains.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.debian_toolchains import (
    DebianUnavailable,
    apt_options,
    arm64_python,
    debian_cuda_12_4,
    toolchains,
    write_apt_root,
)

# Every Dir:: entry apt reads sources, pins, keys or package state from; each must be the private one.
PRIVATE_DIRS = (
    "Dir::Etc::sourcelist",
    "Dir::Etc::sourceparts",
    "Dir::Etc::preferences",
    "Dir::Etc::preferencesparts",
    "Dir::Etc::trustedparts",
    "Dir::State::lists",
    "Dir::State::status",
    "Dir::Cache::archives",
)


def test_the_private_apt_configuration_never_reads_the_machines_sources(tmp_path):
    if not shutil.which("apt-config"):
        pytest.skip("needs apt-config (Debian's apt)")
    toolchain = toolchains()["cuda-12.4"]
    options = apt_options(tmp_path, toolchain.architectures)
    assert "/etc/apt" not in " ".join(options)
    write_apt_root(tmp_path, toolchain.source)
    dump = subprocess.run(["apt-config", *options, "dump"], capture_output=True, text=True, check=True).stdout
    seen = dict(re.findall(r'^(\S+) "(.*)";$', dump, re.MULTILINE))
    for key in PRIVATE_DIRS:
        assert seen[key].startswith(str(tmp_path)), (key, seen[key])
    assert (tmp_path / "etc/sources.list").read_text() == toolchain.source + "\n"
    assert not list((tmp_path / "etc/sources.list.d").iterdir())


def test_every_package_is_pinned_to_a_version():
    for toolchain in toolchains().values():
        for name, entry in toolchain.packages.items():
            assert re.fullmatch(r"[0-9][^ ]*", str(entry.get("version", ""))), (toolchain.name, name)


@pytest.mark.slow
def test_the_unpacked_nvcc_is_12_4_and_runs_only_its_own_tools(tmp_path):
    """Downloads 1.0 GB once (cached). The tools nvcc runs come from PATH, and /usr/local/bin here holds
    CUDA 13.0's: every one must resolve inside the unpacked root, and each must say release 12.4."""
    try:
        cuda = debian_cuda_12_4()
    except DebianUnavailable as exc:
        pytest.skip(str(exc))
    if not shutil.which("g++-12"):
        pytest.skip("needs g++-12 (nvcc 12.4 takes g++ <= 13)")
    version = subprocess.run([str(cuda.nvcc), "--version"], capture_output=True, text=True, check=True).stdout
    assert "release 12.4, V12.4.131" in version
    (tmp_path / "k.cu").write_text(
        "#include <cuda_runtime.h>\n__global__ void k(float* x) { x[threadIdx.x] *= 2; }\n"
        "int main() { float* d; cudaMalloc(&d, 4); k<<<1, 1>>>(d); return 0; }\n"
    )
    command = [str(cuda.nvcc), "-ccbin", "g++-12", "-gencode", "arch=compute_80,code=sm_80", "-o", "k", "k.cu"]
    dry = subprocess.run([*command, "--dryrun"], cwd=tmp_path, capture_output=True, text=True, check=True).stderr
    path = re.search(r"^#\$ PATH=(.*)$", dry, re.MULTILINE).group(1)
    ran = set(re.findall(r"^#\$ (cicc|ptxas|fatbinary|nvlink|cudafe\+\+) ", dry, re.MULTILINE))
    assert ran == {"cicc", "ptxas", "fatbinary", "nvlink", "cudafe++"}, dry
    for tool in ran:
        found = shutil.which(tool, path=path)
        assert found and Path(found).resolve().is_relative_to(cuda.root.resolve()), (tool, found)
        if tool != "cicc":  # cicc has no --version; cudafe++ answers on stderr
            said = subprocess.run([found, "--version"], capture_output=True, text=True)
            assert "release 12.4" in said.stdout + said.stderr, tool
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "k").is_file()


@pytest.mark.slow
def test_debians_arm64_python_runs_under_qemu():
    """Downloads 73 MB once (cached): bookworm's arm64 python3.11 and qemu-user-static, unpacked."""
    try:
        python = arm64_python()
    except DebianUnavailable as exc:
        pytest.skip(str(exc))
    said = subprocess.run(
        [*python, "-c", "import platform, sys, zlib; print(platform.machine(), sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert said.split() == ["aarch64", "3.11.2"]
