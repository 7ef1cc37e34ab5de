"""faforge.backend.sources: the sdist's kernel TUs and version, and where the torch shim is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from faforge.backend import sources
from faforge.backend.errors import BuildError


def _sdist(root: Path) -> Path:
    for name in ("flash_fwd_hdim32_fp16_sm80.cu", "flash_bwd_hdim64_bf16_sm80.cu", "flash_api.cpp"):
        (root / "csrc/flash_attn/src").mkdir(parents=True, exist_ok=True)
        (root / "csrc/flash_attn/src" / name).write_text("")
    (root / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3.post2\n")
    return root


def test_kernel_sources_are_the_glue_then_the_sorted_kernel_tus(tmp_path):
    assert sources.kernel_sources(_sdist(tmp_path)) == [
        "csrc/flash_attn/flash_api.cpp",
        "csrc/flash_attn/src/flash_bwd_hdim64_bf16_sm80.cu",
        "csrc/flash_attn/src/flash_fwd_hdim32_fp16_sm80.cu",
    ]
    with pytest.raises(BuildError, match="is this a flash-attn sdist"):
        sources.kernel_sources(tmp_path / "empty")


def test_only_tus_select_by_file_name_once_each_and_name_the_unknown(tmp_path):
    found = sources.kernel_sources(_sdist(tmp_path))
    assert sources.select_kernels(found, "flash_fwd_hdim32_fp16_sm80.cu, flash_fwd_hdim32_fp16_sm80.cu") == [
        "csrc/flash_attn/src/flash_fwd_hdim32_fp16_sm80.cu"
    ]
    with pytest.raises(
        BuildError, match=re.escape("not a kernel TU of this source tree and feature set: flash_fwd_hdim999.cu")
    ):
        sources.select_kernels(found, "flash_fwd_hdim999.cu")
    with pytest.raises(BuildError, match="--only-tus is empty"):
        sources.select_kernels(found, " ")


def test_version_from_pkg_info_else_the_package(tmp_path):
    assert sources.sdist_version(_sdist(tmp_path / "a")) == "2.8.3.post2"
    (tmp_path / "b/flash_attn").mkdir(parents=True)
    (tmp_path / "b/flash_attn/__init__.py").write_text('__version__ = "2.8.3"\n')
    assert sources.sdist_version(tmp_path / "b") == "2.8.3"


def test_the_shim_beside_the_script_wins_else_the_repos(tmp_path):
    repo_shim = sources.find_shim_dir(None, tmp_path)
    assert (repo_shim / "c10/cuda/CUDAException.h").is_file()
    (tmp_path / "torch_shim/c10/cuda").mkdir(parents=True)
    (tmp_path / "torch_shim/c10/cuda/CUDAException.h").write_text("")
    assert sources.find_shim_dir(None, tmp_path) == (tmp_path / "torch_shim").resolve()
    with pytest.raises(BuildError, match="pass --shim-dir"):
        sources.find_shim_dir(str(tmp_path / "nowhere"), tmp_path)
