"""Library search and symbol binding, on real g++-built libraries and this host's libc."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from faforge.abi.elf import read_info
from faforge.abi.ld_search import system_library_dirs
from faforge.abi.resolve import load_closure, torch_lib_dirs
from faforge.errors import FaforgeError
from tests.abi import elf_fixtures as fx
from tests.abi.test_elf import system_library


@pytest.mark.parametrize("layout", ["torch/lib", "site-packages", "venv", "conda-libtorch"])
def test_torch_lib_dirs_layouts(stand_ins, tmp_path, layout):
    target = {
        "torch/lib": tmp_path / "torch" / "lib",
        "site-packages": tmp_path / "torch" / "lib",
        "venv": tmp_path / "lib" / "python3.11" / "site-packages" / "torch" / "lib",
        "conda-libtorch": tmp_path / "lib",
    }[layout]
    target.mkdir(parents=True)
    shutil.copy(stand_ins[("int", 1)] / "libc10.so", target)
    given = target if layout == "torch/lib" else tmp_path
    assert torch_lib_dirs(given) == (target.resolve(),)


def test_torch_lib_dirs_rejects_a_folder_without_torch(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libfoo.so").write_bytes(b"")
    with pytest.raises(FaforgeError, match="no torch libraries") as raised:
        torch_lib_dirs(tmp_path)
    assert raised.value.exit_code == 2


def test_ld_so_conf_includes_and_comments(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "1.conf").write_text(f"# multiarch\n{tmp_path / 'b'}\n")
    (tmp_path / "conf.d" / "2.conf").write_text(f"{tmp_path / 'c'}  # trailing comment\n")
    conf = tmp_path / "ld.so.conf"
    conf.write_text(f"{tmp_path / 'a'}\ninclude conf.d/*.conf\n{tmp_path / 'missing'}\n")
    dirs = system_library_dirs(conf)
    assert dirs[:3] == (tmp_path / "a", tmp_path / "b", tmp_path / "c")
    assert tmp_path / "missing" not in dirs


def test_runpath_origin_and_load_order(gxx, tmp_path):
    """libtop needs libmid (found through RUNPATH $ORIGIN/deps), which needs libleaf (found through --against)."""
    leaf = fx.compile_shared(gxx, "int leaf() { return 1; }\n", tmp_path / "against" / "libleaf.so", defines={})
    mid = fx.compile_shared(
        gxx,
        "int leaf(); int mid() { return leaf(); }\n",
        tmp_path / "top" / "deps" / "libmid.so",
        defines={},
        flags=[f"-L{leaf.parent}", "-lleaf"],
    )
    top = fx.compile_shared(
        gxx,
        "int mid(); int top() { return mid(); }\n",
        tmp_path / "top" / "libtop.so",
        defines={},
        flags=[f"-L{mid.parent}", "-lmid", "-Wl,-rpath,$ORIGIN/deps", "-Wl,--enable-new-dtags"],
    )
    closure = load_closure(read_info(top), [leaf.parent])
    names = [lib.name for lib in closure.libraries]
    assert names.index("libmid.so") < names.index("libleaf.so")
    paths = {lib.name: lib.path for lib in closure.libraries}
    assert paths["libmid.so"] == mid and paths["libleaf.so"] == leaf
    assert closure.not_found == ()
    assert closure.provider("_Z4leafv", None).name == "libleaf.so"
    assert closure.provider("_Z3topv", None) is None


def test_a_library_for_another_machine_is_skipped(gxx, stand_ins, tmp_path):
    tool = fx.aarch64_gxx()
    if tool is None:
        pytest.skip("aarch64-linux-gnu-g++ is missing (Debian g++-aarch64-linux-gnu; scripts/dev test installs it)")
    arm = fx.build_library(tool, tmp_path / "arm", "int8_bool", 1).parent
    ext = fx.build_extension(gxx, tmp_path / "ext.so", "int8_bool", 1, stand_ins[("int8_bool", 1)])
    closure = load_closure(read_info(ext), [arm, stand_ins[("int8_bool", 1)]])
    c10 = next(lib for lib in closure.libraries if lib.name == "libc10_cuda.so")
    assert c10.path.parent == stand_ins[("int8_bool", 1)]
    only_arm = load_closure(read_info(ext), [arm])
    (missing,) = [nf for nf in only_arm.not_found if nf.name == "libc10_cuda.so"]
    assert missing.wrong_machine == (arm / "libc10_cuda.so",) and missing.is_torch


def test_symbol_versions_bind_like_glibc(gxx, tmp_path):
    ext = fx.compile_shared(
        gxx,
        "#include <cstring>\nvoid* f(void* a, void* b, unsigned long n) { return memcpy(a, b, n); }\n",
        tmp_path / "libf.so",
        defines={},
        flags=["-fno-builtin"],
    )
    closure = load_closure(read_info(ext), [])
    libc = closure.library_named("libc.so.6")
    assert libc is not None and libc.path == system_library("libc.so.6")
    assert libc.provides("memcpy", "GLIBC_2.14")  # memcpy@@GLIBC_2.14
    assert libc.provides("memcpy", "GLIBC_2.2.5")  # memcpy@GLIBC_2.2.5, the hidden old one
    assert libc.provides("memcpy", None)  # an unversioned reference takes the default
    assert not libc.provides("memcpy", "GLIBC_9.9")
    assert not libc.provides("no_such_function", None)


def test_system_dirs_hold_libc():
    assert any((d / "libc.so.6").is_file() for d in system_library_dirs())
    assert all(isinstance(d, Path) for d in system_library_dirs())
