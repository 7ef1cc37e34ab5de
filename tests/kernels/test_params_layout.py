"""One layout for every torch served (the kernel library's Philox layout).

The glue (flash_api.cpp, compiled against each torch) and the kernel library (compiled once against
the torch shim) share Flash_fwd_params / Flash_bwd_params, which hold at::PhiloxCudaState. For every
torch the matrix builds (the versions come from variants/releases.yaml + matrix.yaml, not from this
file), flash.h is compiled against that torch's real PhiloxCudaState headers and against the shim,
and sizes, alignments, every field's offset and philox::unpack's results are compared; the verdict
recorded in variants/kernel-abi.yaml must agree with the measurement.

Headers: from the real PyPI wheel of each torch version (cp311, x86_64), only the four members that
define PhiloxCudaState and unpack, read by HTTP range requests (faforge.wheelfetch), cached in the test
cache's torch-headers/. The whole torch include tree (thousands of headers) is not fetched: the probe
puts a one-line ATen/cuda/CUDAGeneratorImpl.h ahead of them that includes torch's own
ATen/cuda/PhiloxCudaState.h, which is the include the real CUDAGeneratorImpl.h makes (asserted per
version below). test_partial_headers_measure_what_the_full_torch_tree_measures shows on the torch
2.13.0 install that this gives the same numbers as the whole real header tree.
The flash-attn sdist comes from PyPI (sha256-checked, cached; tests/gpu/flash_attn_sdist.py).
"""

from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path

import pytest

from faforge import paths
from faforge.backend.layout import philox_offset_bits
from faforge.kernels import kernel_abi
from faforge.kernels.measure_abi import GENERATOR_STAND_IN, MEMBERS, header_wheel
from faforge.kernels.params_layout import Layout, measure, struct_fields
from faforge.matrix import load_matrix
from faforge.versions import minor_of, vtuple
from faforge.wheelfetch import RemoteFile, fetch_member
from tests.gpu.flash_attn_sdist import SdistUnavailable, flash_attn_sdist
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import NoCudaToolkit, cuda_home
from tests.support.pypi import pypi_listing
from tests.support.tiers import slow
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

HEADERS = cache_dir("torch-headers")
SHIM = paths.repo_root() / "scripts/faforge/kernels/torch_shim"


def matrix_torch_versions() -> list[str]:
    """Every torch version some matrix cell builds against, oldest first."""
    return sorted({cell.torch for cell in load_matrix().cells}, key=vtuple)


def torch_wheel(version: str) -> RemoteFile:
    """The PyPI wheel `faforge bump` reads `version`'s headers from (cp311 x86_64: manylinux1 to 2.6, then 2_28)."""
    return header_wheel(list(pypi_listing("torch").values()), version)


@functools.cache
def torch_headers(version: str) -> tuple[str, Path]:
    """(wheel file name, an include root holding MEMBERS of that wheel and the CUDAGeneratorImpl stand-in)."""
    wheel = torch_wheel(version)
    for member in MEMBERS:
        fetch_member(wheel, f"torch/include/{member}", HEADERS)
    include = HEADERS / wheel.filename / "torch" / "include"
    stand_in = HEADERS / wheel.filename / "generator-stand-in" / "ATen" / "cuda" / "CUDAGeneratorImpl.h"
    stand_in.parent.mkdir(parents=True, exist_ok=True)
    stand_in.write_text(GENERATOR_STAND_IN)
    return wheel.filename, include


@pytest.fixture(scope="module")
def toolchain() -> tuple[Path, Path]:
    """(flash.h's directory from the real sdist, the CUDA toolkit's include directory)."""
    if not shutil.which("g++"):
        pytest.skip("needs g++")
    try:
        cuda_include = cuda_home() / "include"
        flash_src = flash_attn_sdist() / "csrc" / "flash_attn" / "src"
    except (NoCudaToolkit, SdistUnavailable) as exc:
        pytest.skip(str(exc))
    return flash_src, cuda_include


@pytest.fixture(scope="module")
def fields(toolchain) -> dict[str, list[str]]:
    return struct_fields((toolchain[0] / "flash.h").read_text())


@pytest.fixture(scope="module")
def shim_layout(tmp_path_factory, toolchain, fields) -> Layout:
    return measure(tmp_path_factory.mktemp("shim"), [SHIM, *toolchain], fields)


def torch_layout(workdir: Path, version: str, toolchain, fields, **compiler) -> Layout:
    _, include = torch_headers(version)
    return measure(workdir, [include.parent.parent / "generator-stand-in", include, *toolchain], fields, **compiler)


@pytest.fixture(scope="module")
@slow("torch headers from PyPI")
def matrix_layouts(tmp_path_factory, toolchain, fields) -> dict[str, Layout]:
    """torch version -> the layout its real headers give, for every matrix torch (measured once)."""
    root = tmp_path_factory.mktemp("torch")
    return {v: torch_layout(root / v, v, toolchain, fields) for v in matrix_torch_versions()}


def test_every_matrix_torch_minor_has_a_verdict():
    verdicts = kernel_abi.load_kernel_abi()
    minors = sorted({minor_of(v) for v in matrix_torch_versions()}, key=vtuple)
    assert minors[0] == "2.2", minors  # the legacy minors are in the matrix, so they are covered here
    missing = [m for m in minors if m not in verdicts]
    assert not missing, f"variants/kernel-abi.yaml has no verdict for torch {', '.join(missing)}"


@pytest.mark.slow
def test_the_real_generator_header_gets_philox_state_only_through_philox_cuda_state_h():
    """The stand-in is faithful: in every matrix torch, CUDAGeneratorImpl.h includes PhiloxCudaState.h,
    which includes nothing but <cstdint> and PhiloxCudaStateRaw.cuh, which defines the struct and
    includes nothing (so no other header's content can change its layout)."""
    for version in matrix_torch_versions():
        _, include = torch_headers(version)
        generator = (include / MEMBERS[0]).read_text()
        state_h = (include / MEMBERS[1]).read_text()
        assert "#include <ATen/cuda/PhiloxCudaState.h>" in generator, version
        assert not re.search(r"struct\s+PhiloxCudaState\s*\{", generator), version
        assert re.findall(r"#include\s*(\S+)", state_h) == ["<cstdint>", "<ATen/cuda/detail/PhiloxCudaStateRaw.cuh>"], (
            version
        )
        raw = (include / MEMBERS[2]).read_text()
        assert re.search(r"struct\s+PhiloxCudaState\s*\{", raw) and not re.search(r"^\s*#\s*include", raw, re.M), (
            version
        )


@pytest.mark.slow
def test_every_matrix_torch_has_the_layout_its_verdict_claims(matrix_layouts, shim_layout):
    verdicts = kernel_abi.load_kernel_abi()
    rows, wrong = [], []
    for version, layout in matrix_layouts.items():
        differences = layout.differences(shim_layout)
        verdict = verdicts[minor_of(version)]
        measured = kernel_abi.Sizes.of(layout)
        rows.append(
            f"torch {version:7} {torch_headers(version)[0]:52} {measured} "
            f"{len(differences):2} differences from the shim -> {verdict.verdict}"
        )
        if verdict.sizes != measured or (verdict.verdict == kernel_abi.SHARED) != (not differences):
            wrong.append(
                f"torch {version}: recorded {verdict.verdict} {verdict.sizes}, measured {measured}, "
                f"differences: {differences[:6]}"
            )
        if version == verdict.torch:
            wheel = torch_wheel(version)
            assert (verdict.wheel, verdict.sha256) == (wheel.filename, wheel.sha256), (
                f"kernel-abi.yaml cites another wheel for {version}"
            )
    print("\n".join(rows))
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_shared_layout_is_the_shims_in_every_field(matrix_layouts, fields, shim_layout):
    """A 'shared' verdict means all of it: every offset of all three structs and unpack's results."""
    verdicts = kernel_abi.load_kernel_abi()
    shared = [v for v in matrix_layouts if verdicts[minor_of(v)].verdict == kernel_abi.SHARED]
    assert shared
    offsets = sum(len(names) for names in fields.values())
    assert offsets == 181 and "Flash_bwd_params.dq_accum_split_stride" in shim_layout.offsets  # the last field
    for version in shared:
        assert matrix_layouts[version] == shim_layout, version
    assert shim_layout.unpack == (7, 11, 3, 5 + (1 << 33) + 2)


@pytest.mark.slow
def test_own_build_torches_are_the_32_bit_shims_in_every_field(tmp_path, matrix_layouts, toolchain, fields):
    """The kernel library built with --philox-offset-bits 32 serves the torches whose layout differs from
    the default shim's: every offset of all three structs and unpack's results agree."""
    verdicts = kernel_abi.load_kernel_abi()
    shim32 = measure(tmp_path, [SHIM, *toolchain], fields, defines=("FAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS=32",))
    own = [v for v in matrix_layouts if verdicts[minor_of(v)].verdict == kernel_abi.OWN_BUILD]
    assert own
    for version in own:
        assert matrix_layouts[version] == shim32, version


@pytest.mark.slow
def test_the_build_script_reads_each_torchs_philox_width():
    """build_flash_attn.philox_offset_bits on the real headers: what it passes to the glue and the kernel library."""
    verdicts = kernel_abi.load_kernel_abi()
    for version in matrix_torch_versions():
        _, include = torch_headers(version)
        expected = 32 if verdicts[minor_of(version)].verdict == kernel_abi.OWN_BUILD else 64
        assert philox_offset_bits(str(include)) == expected, version


@pytest.mark.slow
def test_partial_headers_measure_what_the_full_torch_tree_measures(tmp_path, toolchain, fields, matrix_layouts):
    """The stand-in for CUDAGeneratorImpl.h changes nothing: on a real torch install, flash.h compiled
    against torch's whole include tree (as flash_api.cpp is) gives the numbers the four headers give."""
    version = "2.13.0"  # installed from this machine's disk (tests/support/torch_envs.py)
    assert version in matrix_torch_versions()
    try:
        include = torch_env(version).site_packages / "torch" / "include"
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    full = measure(tmp_path / "full", [include, include / "torch/csrc/api/include", *toolchain], fields, std="c++20")
    assert full == matrix_layouts[version]


@pytest.mark.slow
def test_aarch64_lays_the_params_out_as_x86_64_does(tmp_path, toolchain, fields, matrix_layouts, shim_layout):
    """The matrix builds linux-aarch64 cells too: the cross compiler's layout (read from the object file,
    not run) of every such torch and of the shim equals x86_64's, so the verdicts hold there as well."""
    cross = shutil.which("aarch64-linux-gnu-g++")
    if cross is None:
        pytest.skip("needs aarch64-linux-gnu-g++ (Debian g++-aarch64-linux-gnu)")
    versions = sorted({cell.torch for cell in load_matrix().cells if cell.platform == "linux-aarch64"}, key=vtuple)
    assert versions
    shim = measure(tmp_path / "shim", [SHIM, *toolchain], fields, compiler=cross, run=False)
    assert (shim.sizes, shim.offsets) == (shim_layout.sizes, shim_layout.offsets)
    for version in versions:
        layout = torch_layout(tmp_path / version, version, toolchain, fields, compiler=cross, run=False)
        assert (layout.sizes, layout.offsets) == (matrix_layouts[version].sizes, matrix_layouts[version].offsets), (
            version
        )
