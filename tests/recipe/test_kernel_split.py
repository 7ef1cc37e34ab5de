"""The kernel library and the glue (the split build), built for real by the build script on the tiny
flash-attn-shaped sdist: nvcc compiles the kernel TUs against the torch shim into
libflash_attn_kernels.so, g++ compiles flash_api.cpp against torch 2.14.1, and the glue links with
-Wl,--no-undefined against the library. What a user sees on a CUDA error is run for real too: this
machine has no GPU, so every launch fails."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from faforge import paths
from faforge.abi import elf
from faforge.abi.fatbin import GpuArchs, read_gpu_archs
from tests.recipe.test_build_script_real import SCRIPT, _run, _tiny_sdist, build_python  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow

SHIM = paths.repo_root() / "scripts/faforge/kernels/torch_shim"
LAUNCHES = re.compile(r"^_ZN5flash(12run_mha_fwd_|28run_mha_fwd_splitkv_dispatch|12run_mha_bwd_)I")


def faforge_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "faforge", *args], capture_output=True, text=True, timeout=300)


def exported(path: Path) -> set[str]:
    return {s.name for s in elf.read_dynamic_symbols(path).all_symbols() if s.defined and s.name}


def imported(path: Path) -> set[str]:
    return {s.name for s in elf.read_dynamic_symbols(path).undefined()}


def wheel_members(wheel: Path, out: Path) -> dict[str, Path]:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(out)
        return {name: out / name for name in zf.namelist()}


@pytest.fixture(scope="module")
def kernel_library(build_python, tmp_path_factory):  # noqa: F811 (an imported fixture, requested by name)
    """--kernels-only on a two-TU sdist, with no torch anywhere on the path."""
    python, env = build_python
    tmp = tmp_path_factory.mktemp("kernels")
    src = _tiny_sdist(tmp, ("flash_fwd_tiny_a_sm80.cu", "flash_bwd_tiny_b_sm80.cu"))
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    result = _run((python, env), src, "1", tmp, "--kernels-only", "--install-lib-dir", str(tmp / "prefix/lib"))
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return tmp / "prefix/lib/libflash_attn_kernels.so", log


def test_kernel_library_needs_no_torch_and_exports_only_launches(kernel_library):
    library, log = kernel_library
    info = elf.read_info(library)
    assert info.soname == "libflash_attn_kernels.so.1"
    assert any(n.startswith("libcudart.so") for n in info.needed), "the shared CUDA runtime, as torch loads it"
    assert not [n for n in info.needed if re.match(r"lib(torch|c10|python)", n)], info.needed
    names = exported(library)
    launches = {n for n in names if LAUNCHES.match(n)}
    assert len(launches) == 2, sorted(names)
    # The C interface, and the symbol naming the PhiloxCudaState layout the glue must have (64-bit by default).
    assert names - launches == {
        "flash_attn_kernels_set_cuda_error_handler",
        "flash_attn_kernels_philox_offset_intragraph_u64",
    }, sorted(names)
    assert not [n for n in imported(library) if re.search(r"c10|at[0-9]|torch|__cxx11|Py", n)]
    assert "kernel library: 2 kernel TUs against the shim" in log and "include-view/torch" not in log
    # Exactly the declared GPU code: no stub image from nvcc's device-link step (its default sm_75).
    assert read_gpu_archs(library) == GpuArchs(("sm_90",), ())


def test_glue_links_against_the_given_library_and_compiles_no_kernel(build_python, kernel_library, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    library, _ = kernel_library
    src = _tiny_sdist(tmp_path, ("flash_fwd_tiny_a_sm80.cu", "flash_bwd_tiny_b_sm80.cu"))
    result = _run(build_python, src, "1", tmp_path, "--kernel-library", str(library))
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    assert ".cu" not in " ".join(line for line in log.splitlines() if "nvcc" in line), "the glue compiled a kernel TU"
    members = wheel_members(next((tmp_path / "dist-abi1").glob("flash_attn-0.0.1-*.whl")), tmp_path / "wheel")
    assert not [m for m in members if "libflash_attn_kernels" in m], "an installed library is not carried again"
    glue = next(p for m, p in members.items() if m.startswith("flash_attn_2_cuda") and m.endswith(".so"))
    assert "libflash_attn_kernels.so.1" in elf.read_info(glue).needed
    assert {n for n in imported(glue) if LAUNCHES.match(n)} == {
        n for n in exported(library) if n.startswith("_ZN5flash12run_mha_fwd_IfLi32E")
    }
    # check-abi finds the library only where it is told to look (an installed kernel package's lib/)
    torch = build_python[1]["PYTHONPATH"]
    alone = faforge_cli("check-abi", str(glue), "--against", torch)
    assert "unverified: libflash_attn_kernels.so.1" in alone.stdout and "GPU code: none" in alone.stdout, (
        alone.stdout + alone.stderr
    )
    told = faforge_cli("check-abi", str(glue), "--against", torch, "--library-dir", str(library.parent))
    assert told.returncode == 0 and "unverified" not in told.stdout, told.stdout + told.stderr
    assert "GPU code: sm_90" in told.stdout, "the glue's GPU code is its kernel library's"


def test_glue_missing_a_launch_does_not_link(build_python, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    """-Wl,--no-undefined against the library: flash_api.cpp calls run_mha_fwd_<float, 32, false>,
    which this library (one TU, specialising head dim 32 under another name) lacks."""
    python, env = build_python
    src = _tiny_sdist(tmp_path / "lib", ("flash_fwd_tiny_sm80.cu",))
    kernel = src / "csrc/flash_attn/src/flash_fwd_tiny_sm80.cu"
    kernel.write_text(kernel.read_text().replace("<float, 32, false>", "<float, 64, false>"))
    built = _run((python, env), src, "1", tmp_path / "lib", "--kernels-only")
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    library = tmp_path / "lib/build-abi1/kernels/libflash_attn_kernels.so"
    glue_src = _tiny_sdist(tmp_path / "glue")
    result = _run(build_python, glue_src, "1", tmp_path / "glue", "--kernel-library", str(library))
    log = result.stdout + result.stderr
    assert result.returncode != 0
    assert "undefined reference" in log and "run_mha_fwd_<float, 32, false>" in log, log[-3000:]


def test_glue_of_a_torch_with_another_philox_layout_is_refused_and_would_not_link(build_python, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    """A library built for torch <= 2.9's 24-byte PhiloxCudaState (--philox-offset-bits 32) cannot serve
    torch 2.14's glue: its layout symbol is the _u32 one, and the glue needs _u64 (read from torch 2.14.1).
    The build script says so before compiling; past that check the link itself fails (the same failure
    the real torch 2.9.1 glue meets against the real 64-bit library, variants/README.md)."""
    python, env = build_python
    src = _tiny_sdist(tmp_path / "lib")
    built = _run((python, env), src, "1", tmp_path / "lib", "--kernels-only", "--philox-offset-bits", "32")
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    library = tmp_path / "lib/build-abi1/kernels/libflash_attn_kernels.so"
    assert "flash_attn_kernels_philox_offset_intragraph_u32" in exported(library)
    result = _run(
        build_python, _tiny_sdist(tmp_path / "glue"), "1", tmp_path / "glue", "--kernel-library", str(library)
    )
    log = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in log
    assert f"--kernel-library {library}: built for the 32-bit Philox layout, but torch 2.14.1" in log, log[-3000:]
    assert "--philox-offset-bits 64" in log and "flash_api" not in log, "refused before compiling the glue"
    # The link is the second line of defence: with the check out of the way, -Wl,--no-undefined refuses the pair.
    check = "    if given:\n        check_kernel_library_layout(given, philox_bits, torch_version)\n"
    assert check in SCRIPT.read_text()
    unchecked = tmp_path / "unchecked_build_flash_attn.py"
    unchecked.write_text(SCRIPT.read_text().replace(check, ""))
    result = _run(
        build_python,
        _tiny_sdist(tmp_path / "glue2"),
        "1",
        tmp_path / "glue2",
        "--kernel-library",
        str(library),
        "--shim-dir",
        str(SHIM),
        script=unchecked,
    )
    log = result.stdout + result.stderr
    assert result.returncode != 0 and '"philox_offset_bits": 64' in log
    assert "undefined reference to `flash_attn_kernels_philox_offset_intragraph_u64'" in log, log[-3000:]


def test_local_wheel_carries_the_library_and_a_cuda_error_is_torchs(build_python, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    """A local build (no conda): one wheel, the library beside the module, found through RUNPATH.
    The launch check goes through the glue's handler, so the error is torch's, as before the split."""
    python, env = build_python
    src = _tiny_sdist(tmp_path)
    result = _run(build_python, src, "1", tmp_path)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    members = wheel_members(next((tmp_path / "dist-abi1").glob("flash_attn-0.0.1-*.whl")), tmp_path / "site")
    assert "flash_attn_2_cuda.libs/libflash_attn_kernels.so.1" in members  # its SONAME, which DT_NEEDED names
    glue = next(p for m, p in members.items() if m.startswith("flash_attn_2_cuda") and m.endswith(".so"))
    assert elf.read_info(glue).runpath == ("$ORIGIN/flash_attn_2_cuda.libs", "$ORIGIN/torch/lib")
    # The recipe's ABI gate finds the cell's GPU code in the library the module carries.
    gate = subprocess.run(
        [str(python), "-m", "faforge.abi.gate", "--expect-cxx11-abi", "1", "--expect-archs", "90"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(env, PYTHONPATH=f"{tmp_path / 'site'}:{paths.repo_root() / 'scripts'}:{env['PYTHONPATH']}"),
    )
    assert gate.returncode == 0 and "ABI gate passed: flash_attn_2_cuda" in gate.stdout, (
        gate.stdout[-3000:] + gate.stderr[-2000:]
    )
    probe = """
import torch, flash_attn_2_cuda
print("twice", flash_attn_2_cuda.twice(torch.ones(2)).tolist())
try:
    flash_attn_2_cuda.launch(4)
    print("launched", torch.cuda.is_available())
except Exception as exc:
    print("error", type(exc).__module__, type(exc).__name__, str(exc).splitlines()[0])
"""
    run_env = dict(env, PYTHONPATH=f"{tmp_path / 'site'}:{env['PYTHONPATH']}")
    out = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=run_env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "twice [2.0, 2.0]"
    if lines[1].startswith("launched"):
        pytest.skip("a GPU is present, so the launch succeeded; the error path needs a machine without one")
    # torch's c10::AcceleratorError (torch >= 2.8), raised by c10_cuda_check_implementation
    assert lines[1].startswith("error torch AcceleratorError CUDA error:"), lines[1]


def test_without_the_glue_a_cuda_error_is_std_runtime_error(build_python, kernel_library, tmp_path):  # noqa: F811 (an imported fixture, requested by name)
    """The library alone (no torch loaded, no handler installed) throws std::runtime_error."""
    library, _ = kernel_library
    src = _tiny_sdist(tmp_path)
    program = tmp_path / "launch.cpp"
    program.write_text("""#include <cstdio>
#include <stdexcept>
#include "flash.h"
int main() {
  flash::Flash_fwd_params params{};
  try {
    flash::run_mha_fwd_<float, 32, false>(params, nullptr);
    std::puts("launched");
  } catch (const std::runtime_error& e) {
    std::printf("runtime_error %s\\n", e.what());
  }
}
""")
    cuda = Path(build_python[1]["CUDA_HOME"])
    exe = tmp_path / "launch"
    subprocess.run(
        [
            "g++",
            "-std=c++17",
            f"-I{SHIM}",
            f"-I{src / 'csrc/flash_attn/src'}",
            f"-I{cuda / 'include'}",
            str(program),
            str(library),
            f"-Wl,-rpath,{library.parent}:{cuda / 'lib64'}",
            "-o",
            str(exe),
        ],
        check=True,
    )
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120).stdout
    if out.startswith("launched"):
        pytest.skip("a GPU is present, so the launch succeeded; the error path needs a machine without one")
    assert out.startswith("runtime_error CUDA error: "), out
    assert "[libflash_attn_kernels]" in out
