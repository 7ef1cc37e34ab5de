"""linux-aarch64 for real on this x86_64 machine, outside a conda world (the documented fallback).

The conda-layout aarch64 prefix (rattler-build --target-platform linux-aarch64 through the world) was
not reached in this session's time box; this is the fallback, each step on real artifacts:
  1. the build backend (recipes/flash-attn/build_flash_attn.py --kernels-only) cross-builds the tiny
     flash-attn-shaped sdist's kernel library: target_platform=linux-aarch64, CXX=aarch64-linux-gnu-g++
     (Debian 12), this machine's nvcc 13.0 with -ccbin and -target-dir sbsa-linux, the sbsa tree from
     PyPI's aarch64 CUDA runtime wheel (tests/support/aarch64_cross.py);
  2. the kernel package's content checks: lib/libflash_attn_kernels.so present, torch-free, aarch64,
     GPU code = the arch list;
  3. the glue (flash_api.cpp) cross-compiled against PyPI's aarch64 torch 2.11.0+cu130 headers and
     Debian's arm64 Python 3.11 headers with aarch64-linux-gnu-g++ (a stand-in for the recipe's glue
     build under conda's cross-python; a pip cell's goes through the backend's --torch-site instead:
     tests/release/test_build_pip_cross_real.py);
  4. `faforge verify` of the resulting linux-aarch64 package: the abi gate natively against the aarch64
     torch (with the cross sysroot), the import gate under qemu in a plain aarch64 prefix (Debian's
     arm64 python3.11 + the aarch64 torch's site-packages), skipped with the reason without qemu.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from faforge.abi import elf
from faforge.channel.local import PackageSpec, assemble
from faforge.kernels.torchfree import KERNEL_LIBRARY_EXPORTS, check_torch_free
from tests.recipe.test_build_script_real import _tiny_sdist
from tests.support.aarch64_cross import CXX, CrossUnavailable, cross_glue, cross_kernel_library, cross_toolchain

pytestmark = pytest.mark.slow

SITE = "lib/python3.11/site-packages"
EXTENSION = "flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so"
BUILD = "py311_torch2_11_cu130_cxx11abi1_h0000000_0"


@pytest.fixture(scope="module")
def cross(tmp_path_factory):
    try:
        return tmp_path_factory.mktemp("cross"), cross_toolchain("2.11.0")
    except CrossUnavailable as exc:
        pytest.skip(str(exc))


def test_cross_build_abi_gate_and_emulated_import(cross):
    tmp, tools = cross
    torch_site, python = tools.torch_site, tools.python
    src, prefix, timings = _tiny_sdist(tmp), tmp / "prefix", {}
    started = time.monotonic()
    built = cross_kernel_library(tools, src, tmp / "build", prefix / "lib", archs="80")
    timings["kernel library (cross)"] = time.monotonic() - started
    log = built.stdout + built.stderr
    assert built.returncode == 0, log[-3000:]
    assert f"-ccbin {CXX} -target-dir sbsa-linux" in (tmp / "build/kernels/build.ninja").read_text()

    library = prefix / "lib/libflash_attn_kernels.so"
    report = check_torch_free(library, expect_archs="80", exports=KERNEL_LIBRARY_EXPORTS)
    assert (report.machine, report.problems) == ("aarch64", ()), report
    assert "libcudart.so.13" in report.needed

    started = time.monotonic()
    ext = cross_glue(tools, src, prefix / "lib", prefix / SITE / EXTENSION, rpath="$ORIGIN/../..")
    timings["glue (cross, g++ only)"] = time.monotonic() - started
    assert elf.read_info(ext).machine == "aarch64"

    package = assemble(
        PackageSpec(
            "flash-attn",
            "0.0.1",
            BUILD,
            "linux-aarch64",
            depends=("python 3.11.*", "pytorch >=2.11.0,<2.12 cuda130*"),
            files={
                f"{SITE}/{EXTENSION}": ext.read_bytes(),
                f"{SITE}/flash_attn/__init__.py": "import flash_attn_2_cuda\n",
                # under its SONAME, the glue's DT_NEEDED, and its link name, as the recipe installs it
                "lib/libflash_attn_kernels.so.1": library.read_bytes(),
                "lib/libflash_attn_kernels.so": library.read_bytes(),
            },
        ),
        tmp / "out",
    )
    started = time.monotonic()
    verified = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "verify",
            str(package),
            "--gates",
            "abi,import,gpu",
            "--against",
            str(torch_site),
            "--manifest",
            str(tmp / "verification"),
            "--qemu",
            str(python.qemu),
            "--sysroot",
            str(python.sysroot),
            "--target-python",
            str(python.python),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    timings["verify (abi native, import emulated)"] = time.monotonic() - started
    assert verified.returncode == 3, verified.stdout[-2000:] + verified.stderr[-2000:]  # gpu: skipped
    gates = {r["gate"]: (r["result"], r["detail"]) for r in json.loads(verified.stdout)["results"]}
    print(json.dumps({"timings_s": {k: round(v, 1) for k, v in timings.items()}, "gates": gates}, indent=1))
    assert gates["abi"][0] == "passed", gates["abi"]
    assert gates["import"][0] == "passed" and "emulated: qemu-aarch64-static" in gates["import"][1], gates["import"]
    assert "torch 2.11.0+cu130 on aarch64" in gates["import"][1]
    assert gates["gpu"][0] == "skipped"
