"""faforge.backend.ninja: the kernel library's flags and ninja file."""

from __future__ import annotations

import os
from pathlib import Path

from faforge.backend import ninja

SRC = Path("/w/flash attn")
SHIM = Path("/w/shim")
KERNELS = [
    "csrc/flash_attn/src/flash_bwd_hdim128_fp16_sm80.cu",
    "csrc/flash_attn/src/flash_fwd_hdim32_fp16_sm80.cu",
    "csrc/flash_attn/src/flash_bwd_hdim32_fp16_sm80.cu",
]


def test_one_tu_of_each_class_compiles_first():
    assert ninja.ordered_kernels(KERNELS) == [KERNELS[1], KERNELS[2], KERNELS[0]]


def test_compile_flags_put_the_shim_before_upstreams_headers():
    flags = ninja.kernel_compile_flags(SRC, SHIM, [(90, False)], 2, 32)
    assert flags[flags.index("--threads") + 1] == "2" and "-std=c++17" in flags
    assert (
        flags.index("arch=compute_90,code=sm_90")
        < flags.index("-DFAFORGE_PHILOX_OFFSET_INTRAGRAPH_BITS=32")
        < flags.index(f"-I{SHIM}")
    )
    assert [f for f in flags if f.startswith("-I")] == [
        f"-I{SHIM}",
        f"-I{SHIM / 'api'}",
        f"-I{SRC / 'csrc/flash_attn'}",
        f"-I{SRC / 'csrc/flash_attn/src'}",
        f"-I{SRC / 'csrc/cutlass/include'}",
    ]
    assert not any(
        f.startswith("-DFAFORGE_PHILOX") for f in ninja.kernel_compile_flags(SRC, SHIM, [(90, False)], 1, 64)
    )


def test_link_flags_name_the_soname_the_exports_and_the_shared_runtime():
    flags = ninja.kernel_link_flags(SHIM, ["/cuda/lib64"])
    assert flags[:4] == ["-shared", "-nodlink", "-cudart", "shared"] and "-L/cuda/lib64" in flags
    assert (
        f"-Xlinker=--version-script={SHIM / 'exports.map'}" in flags
        and "-Xlinker=-soname=libflash_attn_kernels.so.1" in flags
    )


def test_ninja_file_compiles_each_tu_and_links_them_with_the_shims_error_handlers():
    text = ninja.kernel_ninja(["/bin/ccache", "/cuda/bin/nvcc"], SRC, KERNELS, SHIM, ["-O3"], ["-shared"])
    lines = text.splitlines()
    assert (
        "nvcc = /bin/ccache /cuda/bin/nvcc" in lines
        and "cflags = -O3" in lines
        and "  command = /cuda/bin/nvcc $in -o $out $ldflags" in lines
    )
    builds = [line for line in lines if line.startswith("build obj/")]
    assert builds[0] == (
        "build obj/flash_fwd_hdim32_fp16_sm80.cu.o: compile /w/flash$ "
        "attn/csrc/flash_attn/src/flash_fwd_hdim32_fp16_sm80.cu"
    )
    assert builds[-1] == "build obj/kernel_errors.cpp.o: compile /w/shim/kernel_errors.cpp"
    assert lines[-2:] == [
        "build libflash_attn_kernels.so: link " + " ".join(b.split(":")[0][len("build ") :] for b in builds),
        "default libflash_attn_kernels.so",
    ]
    assert text.endswith("\n") and "  cflags = $cflags" not in text


def test_per_file_flags_extend_one_tus_compile():
    """FA3's TUs differ in -gencode and feature defines: one binding under that TU's build line."""
    text = ninja.kernel_ninja(
        ["nvcc"], SRC, KERNELS, SHIM, ["-O3"], [], file_flags={KERNELS[0]: ["-gencode", "arch=compute_90a,code=sm_90a"]}
    )
    lines = text.splitlines()
    at = lines.index(
        "build obj/flash_bwd_hdim128_fp16_sm80.cu.o: compile /w/flash$ "
        "attn/csrc/flash_attn/src/flash_bwd_hdim128_fp16_sm80.cu"
    )
    assert lines[at + 1] == "  cflags = $cflags -gencode arch=compute_90a,code=sm_90a"
    assert sum(line.startswith("  cflags") for line in lines) == 1


def test_ninja_escapes_spaces_colons_and_dollars():
    assert ninja.ninja_escape("/a b:c$d") == "/a$ b$:c$$d"


def test_the_library_is_installed_into_the_lib_dir(tmp_path):
    built = tmp_path / "build/libflash_attn_kernels.so"
    built.parent.mkdir()
    built.write_bytes(b"ELF")
    assert ninja.install_library(built, tmp_path / "prefix/lib") == tmp_path / "prefix/lib/libflash_attn_kernels.so"
    # Under its SONAME, with the link name a relative symlink to it; installing again replaces both.
    assert (tmp_path / "prefix/lib/libflash_attn_kernels.so.1").read_bytes() == b"ELF"
    assert os.readlink(tmp_path / "prefix/lib/libflash_attn_kernels.so") == "libflash_attn_kernels.so.1"
    built.write_bytes(b"ELF2")
    ninja.install_library(built, tmp_path / "prefix/lib")
    assert (tmp_path / "prefix/lib/libflash_attn_kernels.so").read_bytes() == b"ELF2"
