"""rattler-build-like build trees: names, python-versioned paths, and sources left untouched."""

from __future__ import annotations

from pathlib import Path

import pytest

from faforge.buildcost.layout import LayoutSources, make_layout, placeholder_name
from faforge.errors import FaforgeError


def test_placeholder_name_has_the_requested_length():
    assert placeholder_name(30) == "host_env_placehold_placehold_p"
    assert len(placeholder_name(131)) == 131
    with pytest.raises(FaforgeError):
        placeholder_name(4)


def fake_sources(tmp_path: Path) -> LayoutSources:
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin/nvcc.profile").write_text(
        'TOP = $(_HERE_)/..\nINCLUDES +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)\n'
    )
    (cuda / "targets/x86_64-linux/include").mkdir(parents=True)
    (cuda / "targets/x86_64-linux/include/cuda.h").write_text("// cuda")
    torch = tmp_path / "torch/include/c10"
    torch.mkdir(parents=True)
    (torch / "x.h").write_text("// c10")
    py = tmp_path / "python/include/python3.12"
    py.mkdir(parents=True)
    (py / "Python.h").write_text("// py")
    sdist = tmp_path / "sdist"
    (sdist / "csrc/flash_attn/src").mkdir(parents=True)
    (sdist / "csrc/cutlass/include/cute").mkdir(parents=True)
    for name in ("flash.h", "flash_fwd_hdim32_fp16_sm80.cu", "flash_bwd_hdim32_fp16_sm80.cu"):
        (sdist / "csrc/flash_attn/src" / name).write_text("//")
    return LayoutSources(cuda_home=cuda, torch_include=tmp_path / "torch/include", python_include=py, sdist=sdist)


def test_make_layout_mirrors_a_rattler_build_tree(tmp_path):
    sources = fake_sources(tmp_path)
    layout = make_layout(
        tmp_path / "out",
        build_id="1780000001",
        placeholder_length=60,
        python_version="3.12",
        sources=sources,
        tus=["flash_fwd_hdim32_fp16_sm80.cu"],
        triplet="x86_64-linux",
    )
    assert layout.root == tmp_path / "out/bld/rattler-build_flash-attn_1780000001"
    assert layout.host_env.name == placeholder_name(60)
    assert (layout.site_packages / "torch/include/c10/x.h").is_file()
    assert layout.site_packages.parts[-2:] == ("python3.12", "site-packages")
    assert (layout.host_env / "targets/x86_64-linux/include/cuda.h").is_file()
    assert layout.temp_dir.name.endswith("cpython-312") and layout.temp_dir.is_dir()
    kernels = sorted(p.name for p in (layout.work / "csrc/flash_attn/src").iterdir())
    assert kernels == ["flash.h", "flash_fwd_hdim32_fp16_sm80.cu"]
    # conda-forge's nvcc.profile searches $CUDA_INCLUDE_DIRS; the source profile is not written through.
    assert "$(CUDA_INCLUDE_DIRS)" in (layout.build_env / "bin/nvcc.profile").read_text()
    assert "CUDA_INCLUDE_DIRS" not in (sources.cuda_home / "bin/nvcc.profile").read_text()
    assert (
        layout.cuda_include_dirs_env()
        == f"-I{layout.host_env}/targets/x86_64-linux/include -I{layout.build_env}/targets/x86_64-linux/include"
    )


def test_make_layout_refuses_an_existing_tree(tmp_path):
    sources = fake_sources(tmp_path)
    kwargs = dict(
        build_id="1", placeholder_length=40, python_version="3.11", sources=sources, tus=[], triplet="x86_64-linux"
    )
    make_layout(tmp_path / "out", **kwargs)
    with pytest.raises(FaforgeError, match="exists"):
        make_layout(tmp_path / "out", **kwargs)
