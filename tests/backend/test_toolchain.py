"""faforge.backend.toolchain: the CUDA home, triplet, header and runtime library folders."""

from __future__ import annotations

import pytest

from faforge.backend import toolchain as script
from faforge.backend.errors import BuildError


def test_nvcc_cuda_include_dirs_follow_nvcc_order_and_skip_missing(tmp_path):
    build = tmp_path / "build_env/targets/x86_64-linux/include"
    host = tmp_path / "host_env_placehold/targets/x86_64-linux/include"
    build.mkdir(parents=True)
    host.mkdir(parents=True)
    env = {"CUDA_INCLUDE_DIRS": f" -I{host} -I{build} -I{tmp_path}/missing"}
    assert script.nvcc_cuda_include_dirs(str(tmp_path / "build_env"), env, "x86_64-linux") == [str(build), str(host)]
    assert script.nvcc_cuda_include_dirs(str(tmp_path / "build_env"), {}, "x86_64-linux") == [str(build)]


def test_cuda_triplet_names_known_machines_and_rejects_others():
    assert script.cuda_triplet("aarch64") == "sbsa-linux"
    with pytest.raises(BuildError, match="riscv64"):
        script.cuda_triplet("riscv64")


def _lib(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "libcudart.so").write_text("")
    return str(folder)


def test_cudart_comes_from_the_host_prefix_first_then_the_toolkit(tmp_path):
    home = tmp_path / "cuda"
    toolkit_lib = _lib(home / "targets/x86_64-linux/lib")
    assert script.cudart_library_dirs(str(home), {}, "x86_64-linux") == [toolkit_lib]
    prefix_lib = _lib(tmp_path / "prefix/lib")
    assert script.cudart_library_dirs(str(home), {"PREFIX": str(tmp_path / "prefix")}, "x86_64-linux") == [prefix_lib]
    with pytest.raises(BuildError, match="cuda-cudart-dev"):
        script.cudart_library_dirs(str(tmp_path / "empty"), {}, "x86_64-linux")


def test_a_toolkit_of_another_layout_names_its_folders(tmp_path):
    """Debian's nvidia-cuda-toolkit: nvcc under /usr/lib/nvidia-cuda-toolkit, headers in /usr/include,
    libcudart in /usr/lib/<multiarch>; no targets/ tree."""
    include = tmp_path / "usr/include"
    include.mkdir(parents=True)
    lib = _lib(tmp_path / "usr/lib/x86_64-linux-gnu")
    debian = script.CudaToolkit(
        home=str(tmp_path / "usr/lib/nvidia-cuda-toolkit"),
        triplet="x86_64-linux",
        include_dir=str(include),
        lib_dir=lib,
    )
    assert debian.nvcc == str(tmp_path / "usr/lib/nvidia-cuda-toolkit/bin/nvcc")
    assert debian.include_dirs({}) == [str(include)]
    assert debian.cudart_dirs({}) == [lib]


def test_a_cross_toolkit_is_its_target_triplet(tmp_path):
    """A cross build's target tree is home/targets/<triplet>, as in a native build; its emulator is data for later."""
    lib = _lib(tmp_path / "cuda/targets/sbsa-linux/lib")
    (tmp_path / "cuda/targets/sbsa-linux/include").mkdir()
    cross = script.CudaToolkit(
        home=str(tmp_path / "cuda"), triplet="sbsa-linux", emulator=("qemu-aarch64", "-L", "/sysroot")
    )
    assert cross.include_dirs({}) == [str(tmp_path / "cuda/targets/sbsa-linux/include")]
    assert cross.cudart_dirs({}) == [lib]


def test_a_cross_build_links_the_targets_cudart_not_the_build_machines(tmp_path):
    """The first real FA3 aarch64 cross build failed to link: the CUDA home's lib64/ (the x86_64
    toolkit's, as in tests/support/aarch64_cross.py's overlay and a CUDA install with a cross target tree)
    came before targets/sbsa-linux/lib, so -lcudart found only an incompatible library."""
    home = tmp_path / "cuda"
    _lib(home / "lib64")
    target = _lib(home / "targets/sbsa-linux/lib")
    assert script.cudart_library_dirs(str(home), {}, "sbsa-linux") == [target]


def test_cuda_home_comes_from_the_environment_first(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert script.find_cuda_home() == str(tmp_path)
    assert script.target_toolkit({}, "x86_64") == script.CudaToolkit(home=str(tmp_path), triplet="x86_64-linux")


def test_an_nvcc_that_does_not_run_is_named(tmp_path):
    with pytest.raises(BuildError, match="install the CUDA compiler or set CUDA_HOME"):
        script.nvcc_version(str(tmp_path / "bin/nvcc"))


def test_a_cross_build_targets_conda_target_platform_not_the_build_machine(monkeypatch, tmp_path):
    """rattler-build's --target-platform linux-aarch64 on an x86_64 machine: the toolkit's triplet is
    the target's sbsa-linux tree (conda-forge's cuda-*_linux-aarch64 layout), and nvcc hands host code
    to the cross compiler in $CXX. Was x86_64-linux from uname, hidden by $PREFIX/lib/libcudart.so."""
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    lib = _lib(tmp_path / "cuda/targets/sbsa-linux/lib")
    _lib(tmp_path / "cuda/targets/x86_64-linux/lib")
    env = {"target_platform": "linux-aarch64", "build_platform": "linux-64", "CXX": "aarch64-conda-linux-gnu-c++"}
    cross = script.target_toolkit(env, "x86_64")
    assert cross.triplet == "sbsa-linux"
    assert cross.cudart_dirs(env) == [lib]
    # -target-dir: nvcc 13.0 given an aarch64 -ccbin picks targets/aarch64-linux (Jetson), not sbsa-linux,
    # and fails with "cuda_runtime.h: No such file" where only the sbsa tree exists (the real aarch64 cross build).
    assert cross.host_flags == ("-ccbin", "aarch64-conda-linux-gnu-c++", "-target-dir", "sbsa-linux")
    native = script.target_toolkit({"target_platform": "linux-64", "CXX": "g++"}, "x86_64")
    assert (native.triplet, native.host_flags) == ("x86_64-linux", ())
    assert script.target_toolkit({}, "aarch64").triplet == "sbsa-linux"


def test_a_cross_build_without_a_cross_compiler_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match=r"linux-aarch64.*CXX"):
        script.target_toolkit({"target_platform": "linux-aarch64"}, "x86_64")
    with pytest.raises(BuildError, match="target_platform 'osx-arm64'"):
        script.target_toolkit({"target_platform": "osx-arm64"}, "x86_64")


def _tool(folder, name, said, stream="stdout"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, {said}' {'>&2' if stream == 'stderr' else ''}\n")
    path.chmod(0o755)
    return path


def _fake_nvcc(tmp_path, release, tools_dir, other_dir):
    """An nvcc whose --dryrun names the PATH its profile builds: its own folder, then the caller's."""
    nvcc = _tool(tmp_path / "home/bin", "nvcc", f"release {release}, V{release}.1")
    nvcc.write_text(
        f"#!/bin/sh\ncase \"$*\" in *--dryrun*) echo '#$ PATH={tools_dir}:{other_dir}' >&2;"
        f" echo '#$ cicc --x' >&2; echo '#$ ptxas -arch=sm_80' >&2; echo '#$ fatbinary -x' >&2;"
        f" echo '#$ nvlink -x' >&2; echo '#$ cudafe++ -x' >&2;;\n"
        f"*) echo 'Cuda compilation tools, release {release}, V{release}.1';; esac\n"
    )
    return nvcc


def test_the_tools_nvcc_runs_are_named_with_their_release(tmp_path):
    """The log of a build says which cicc, ptxas, fatbinary, nvlink and cudafe++ nvcc ran (Debian's CUDA 12.4
    once ran CUDA 13.0's)."""
    own = tmp_path / "home/bin"
    for name in ("ptxas", "fatbinary", "nvlink"):
        _tool(own, name, "release 12.4, V12.4.131")
    _tool(own, "cudafe++", "release 12.4, V12.4.131", stream="stderr")  # cudafe++ answers on stderr
    _tool(tmp_path / "home/nvvm/bin", "cicc", "no --version")
    nvcc = _fake_nvcc(tmp_path, "12.4", f"{tmp_path}/home/nvvm/bin:{own}", tmp_path / "elsewhere")
    tools = script.nvcc_tools(str(nvcc), tmp_path / "scratch")
    assert tools == {name: str(own / name) for name in ("ptxas", "fatbinary", "nvlink", "cudafe++")} | {
        "cicc": str(tmp_path / "home/nvvm/bin/cicc")
    }
    assert script.check_tool_releases(str(nvcc), tools) == [
        f"nvcc {tmp_path}/home/bin/nvcc: CUDA 12.4",
        f"  runs cicc {tmp_path}/home/nvvm/bin/cicc: inside nvcc's toolkit",
        *(f"  runs {name} {own / name}: CUDA 12.4" for name in ("ptxas", "fatbinary", "nvlink", "cudafe++")),
    ]


def test_a_tool_of_another_cuda_on_path_is_refused(tmp_path):
    """Debian's nvcc 12.4 with a profile that misses its tools ran CUDA 13.0's ptxas, fatbinary, nvlink
    and cudafe++ from /usr/local/bin without a word (Debian's CUDA 12.4): the build must stop and say so."""
    own, other = tmp_path / "home/bin", tmp_path / "usr-local-bin"
    _tool(tmp_path / "home/nvvm/bin", "cicc", "x")
    _tool(own, "ptxas", "release 12.4, V12.4.131")
    for name in ("fatbinary", "nvlink", "cudafe++"):
        _tool(other, name, "release 13.0, V13.0.88")
    nvcc = _fake_nvcc(tmp_path, "12.4", f"{tmp_path}/home/nvvm/bin:{own}", other)
    with pytest.raises(
        BuildError, match=r"nvcc .* is CUDA 12.4 but would run fatbinary .*usr-local-bin/fatbinary of CUDA 13.0"
    ):
        script.check_tool_releases(str(nvcc), script.nvcc_tools(str(nvcc), tmp_path / "scratch"))


def test_a_toolkit_made_of_symlinks_keeps_its_own_cicc(tmp_path):
    """A toolkit assembled from links (the aarch64 test's sbsa overlay links nvvm/ to the real toolkit's)
    runs the cicc its own tree names; a cicc outside that tree, by link or by path, is still refused."""
    real = tmp_path / "cuda-13.0"
    _tool(real / "nvvm/bin", "cicc", "x")
    for name in ("ptxas", "fatbinary", "nvlink", "cudafe++"):
        _tool(tmp_path / "home/bin", name, "release 13.0, V13.0.88")
    (tmp_path / "home/nvvm").symlink_to(real / "nvvm")
    nvcc = _fake_nvcc(tmp_path, "13.0", f"{tmp_path}/home/nvvm/bin:{tmp_path}/home/bin", tmp_path / "elsewhere")
    lines = script.check_tool_releases(str(nvcc), script.nvcc_tools(str(nvcc), tmp_path / "scratch"))
    assert lines[1] == f"  runs cicc {tmp_path}/home/nvvm/bin/cicc: inside nvcc's toolkit"
    stray = _fake_nvcc(tmp_path, "13.0", f"{real}/nvvm/bin:{tmp_path}/home/bin", tmp_path / "elsewhere")
    with pytest.raises(BuildError, match=r"would run .*cuda-13.0/nvvm/bin/cicc, outside its toolkit"):
        script.check_tool_releases(str(stray), script.nvcc_tools(str(stray), tmp_path / "scratch"))


def _nvcc_wrapper(folder, toolkit):
    """A wrapper script on PATH, as /usr/local/bin/nvcc execs /usr/local/cuda-13.0/bin/nvcc here: its --dryrun
    says the toolkit (TOP=), as the real nvcc's does."""
    folder.mkdir(parents=True)
    (folder / "nvcc").write_text(f"#!/bin/sh\necho '#$ TOP={toolkit}' >&2\n")
    (folder / "nvcc").chmod(0o755)
    return folder


def test_the_nvcc_on_path_names_its_toolkit_not_the_folder_above_a_wrapper(monkeypatch, tmp_path):
    """One rule for every build: the pip world's glue found its toolkit by asking nvcc, the kernel library by the
    folder above it, so a wrapper script gave the kernel build /usr/local and the glue /usr/local/cuda-13.0."""
    toolkit = tmp_path / "cuda-13.0"
    toolkit.mkdir()
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(_nvcc_wrapper(tmp_path / "bin", toolkit)))
    assert script.find_cuda_home() == str(toolkit)
