"""faforge.backend.ccache: the include view, path rules, ccache settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from faforge.backend import ccache as script
from faforge.backend.errors import BuildError


def test_include_view_links_each_root_under_a_fixed_name(tmp_path):
    torch_inc = tmp_path / "host_env_placehold_pl/lib/python3.11/site-packages/torch/include"
    torch_inc.mkdir(parents=True)
    (torch_inc / "c10.h").write_text("x")
    view = script.include_view(tmp_path / "work/build/include-view", [("torch", str(torch_inc))])
    link = tmp_path / "work/build/include-view/torch"
    assert view == {str(torch_inc): str(link)}
    assert link.is_symlink() and (link / "c10.h").read_text() == "x"
    # Re-running (a resumed build) re-points the link instead of failing.
    other = tmp_path / "other"
    other.mkdir()
    script.include_view(tmp_path / "work/build/include-view", [("torch", str(other))])
    assert Path(os.readlink(link)) == other


def test_include_view_refuses_to_replace_a_real_directory(tmp_path):
    (tmp_path / "view/torch").mkdir(parents=True)
    with pytest.raises(BuildError, match="not a symlink"):
        script.include_view(tmp_path / "view", [("torch", str(tmp_path))])


def test_through_view_rewrites_only_paths_inside_a_root_longest_first():
    mapping = {"/p/torch/include": "/w/view/torch", "/p": "/w/view/prefix", "/cuda": "/w/view/cuda-home"}
    assert script.through_view(
        [
            "/p/torch/include",
            "/p/torch/include/torch/csrc/api/include",
            "/p/include/python3.11",
            "/cudax/include",
            "/src/csrc",
        ],
        mapping,
    ) == [
        "/w/view/torch",
        "/w/view/torch/torch/csrc/api/include",
        "/w/view/prefix/include/python3.11",
        "/cudax/include",
        "/src/csrc",
    ]


def test_view_roots_name_torch_the_cuda_home_and_each_cuda_dir():
    assert script.view_roots("/t/include", "/cuda", ["/a", "/b"]) == [
        ("torch", "/t/include"),
        ("cuda-home", "/cuda"),
        ("cuda-0", "/a"),
        ("cuda-1", "/b"),
    ]


def test_ccache_base_dir_is_the_build_root_rattler_build_creates():
    root = Path("/out/bld/rattler-build_flash-attn_1780000001")
    assert script.ccache_base_dir(root / "work", [str(root / "host_env_placehold_pl"), str(root / "build_env")]) == root
    # Sharing only '/' (a venv build against /usr/local/cuda): the source's parent, never '/'.
    assert script.ccache_base_dir(Path("/src/flash-attn"), ["/venv", "/usr/local/cuda"]) == Path("/src")


def test_ccache_env_points_torch_at_ccache_and_keys_on_compiler_versions():
    a = script.compiler_identity(["Cuda compilation tools, release 13.0, V13.0.88", "gcc (GCC) 14.2.0"])
    assert a == script.compiler_identity(["Cuda compilation tools, release 13.0, V13.0.88", "gcc (GCC) 14.2.0"])
    assert a != script.compiler_identity(["Cuda compilation tools, release 13.0, V13.0.88", "gcc (GCC) 15.1.0"])
    env = script.ccache_env("/bin/ccache", "/be/bin/nvcc", Path("/out/bld/x"), a)
    assert env == {
        "PYTORCH_NVCC": "/bin/ccache /be/bin/nvcc",
        "CCACHE_BASEDIR": "/out/bld/x",
        "CCACHE_NOHASHDIR": "1",
        "CCACHE_COMPILERCHECK": f"string:{a}",
        "CCACHE_SLOPPINESS": "include_file_ctime",
    }


def test_hits_and_misses_count_the_difference():
    before = {"direct_cache_hit": 3, "preprocessed_cache_hit": 1, "cache_miss": 5}
    after = {"direct_cache_hit": 5, "preprocessed_cache_hit": 2, "cache_miss": 6}
    assert script.hits_and_misses(before, after) == (3, 1)


def test_a_tool_without_version_output_is_named(tmp_path):
    with pytest.raises(BuildError, match="needed to key the compiler cache"):
        script.version_text(str(tmp_path / "no-such-nvcc"))
