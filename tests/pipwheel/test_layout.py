"""faforge.pipwheel.layout and the kernel wheel's CUDA runtime requirement: names, labels, build tags and
RUNPATHs as the design names them, and the runtime wheel read from real torch METADATA."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faforge import wheelfetch, wheelnames
from faforge.errors import FaforgeError
from faforge.pipwheel import layout
from faforge.pipwheel.facts import requires_dist_of
from faforge.pipwheel.kernel import runtime_range_of_kernel_wheel
from tests.support.cache import cache_dir
from tests.support.pypi import pypi_listing
from tests.support.torch_envs import TorchEnvUnavailable, torch_env


def test_runpaths_follow_pips_layout():
    assert layout.kernel_runpath("13.0") == ("$ORIGIN/../nvidia/cu13/lib",)
    assert layout.kernel_runpath("12.8") == ("$ORIGIN/../nvidia/cuda_runtime/lib",)
    assert layout.glue_runpath("13.0") == (
        "$ORIGIN/libflash_attn_kernels",
        "$ORIGIN/torch/lib",
        "$ORIGIN/nvidia/cu13/lib",
    )
    assert layout.glue_runpath("12.4") == (
        "$ORIGIN/libflash_attn_kernels",
        "$ORIGIN/torch/lib",
        "$ORIGIN/nvidia/cuda_runtime/lib",
    )
    assert layout.package_runpath("13.0") == ("$ORIGIN/../torch/lib", "$ORIGIN/../nvidia/cu13/lib")
    with pytest.raises(FaforgeError, match="no known pip layout"):
        layout.cuda_lib_dir("14.0")


def test_labels_and_build_tags():
    assert wheelnames.kernel_label("cu130_sm80_90_100_120ptx_philox64_ha5d2e90_0") == (
        "cu130.sm80.90.100.120ptx.philox64.ha5d2e90",
        "0",
    )
    assert wheelnames.kernel_label("cu124_sm80_90ptx_philox32_h0b03ec0_3") == (
        "cu124.sm80.90ptx.philox32.h0b03ec0",
        "3",
    )
    assert layout.glue_label("2.11", "13.0", 1) == "torch2.11.cu130.abi1"
    assert layout.glue_label("2.5", "12.4", 0) == "torch2.5.cu124.abi0"
    assert layout.glue_build_tag("py312_torch2_11_cu130_cxx11abi1_h1a2b3c4_0") == "0h1a2b3c4"
    assert layout.glue_build_tag("2h1a2b3c4") == "2h1a2b3c4"
    assert (
        layout.torch_requirement("2.11") == "torch>=2.11,<2.12"
        and layout.torch_requirement("2.9") == "torch>=2.9,<2.10"
    )
    assert layout.arch_label(layout.parse_archs("80;90a")) == "sm80.90a"
    assert layout.arch_label(layout.parse_archs("80,90,100,120+PTX")) == "sm80.90.100.120ptx"


@pytest.mark.parametrize(
    "call, says",
    [
        (
            lambda: wheelnames.kernel_label("py312_torch2_11_cu130_cxx11abi1_h1a2b3c4_0"),
            "not a kernel package's build string",
        ),
        (lambda: layout.glue_build_tag("h1a2b3c4"), "--build-tag 'h1a2b3c4' is neither"),
        (lambda: layout.glue_label("2", "13.0", 1), "--torch '2' is not a torch minor"),
        (lambda: layout.glue_label("2.11", "13", 1), "--cuda '13' is not a CUDA version"),
        (lambda: layout.glue_label("2.11", "13.0", 2), "--cxx11-abi 2 is not 0 or 1"),
        (lambda: layout.parse_archs("80;80"), "names an arch twice"),
        (lambda: layout.parse_archs(";"), "names no arch"),
        (lambda: layout.parse_archs("sm_80"), "'sm_80' is not an arch"),
    ],
)
def test_bad_values_are_refused_naming_the_option(call, says):
    with pytest.raises(FaforgeError, match=says):
        call()


def _torch_2_11_metadata() -> Path:
    """PyPI's torch 2.11.0 (CUDA 13.0) METADATA, read by range requests from its wheel and cached."""
    wheel = pypi_listing("torch")["torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl"]
    return wheelfetch.fetch_member(wheel, "torch-2.11.0.dist-info/METADATA", cache_dir("torch-metadata"))


@pytest.mark.slow  # reads PyPI's torch METADATA
def test_the_cuda_runtime_requirement_of_real_torch_metadata():
    """torch 2.11.0 and 2.14.1 require cuda-toolkit[...cudart...]==13.0.x (which requires
    nvidia-cuda-runtime==13.0.96.*); torch 2.4.0 nvidia-cuda-runtime-cu12 (==12.1.105). The kernel wheel names the
    runtime distribution itself, by its CUDA alone, and a torch's METADATA only cross-checks the major."""
    assert runtime_range_of_kernel_wheel("13.0") == "nvidia-cuda-runtime>=13.0,<14"
    assert (
        runtime_range_of_kernel_wheel("13.0", requires_dist_of(_torch_2_11_metadata()))
        == "nvidia-cuda-runtime>=13.0,<14"
    )
    try:
        torch = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    metadata = torch.site_packages / "torch-2.14.1.dist-info" / "METADATA"
    assert runtime_range_of_kernel_wheel("13.0", requires_dist_of(metadata)) == "nvidia-cuda-runtime>=13.0,<14"
    with pytest.raises(FaforgeError, match=re.escape("CUDA 13.0.3, not the kernel's CUDA 12.8")):
        runtime_range_of_kernel_wheel("12.8", requires_dist_of(metadata))
    wheel = pypi_listing("torch")["torch-2.4.0-cp311-cp311-manylinux1_x86_64.whl"]
    old = wheelfetch.fetch_member(wheel, "torch-2.4.0.dist-info/METADATA", cache_dir("torch-metadata"))
    assert runtime_range_of_kernel_wheel("12.1", requires_dist_of(old)) == "nvidia-cuda-runtime-cu12>=12.1,<13"
    assert runtime_range_of_kernel_wheel("12.1") == "nvidia-cuda-runtime-cu12>=12.1,<13"


def test_a_cpu_torch_names_no_runtime(tmp_path):
    metadata = tmp_path / "METADATA"
    metadata.write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\nRequires-Dist: filelock\n")
    with pytest.raises(FaforgeError, match="no requirement naming the CUDA runtime"):
        runtime_range_of_kernel_wheel("13.0", requires_dist_of(metadata))
    metadata.write_text("not metadata\n")
    with pytest.raises(FaforgeError, match="is not core metadata"):
        requires_dist_of(metadata)
