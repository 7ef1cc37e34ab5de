"""`faforge verify` of linux-aarch64 wheels on this x86_64 machine (the pip world): the glue wheel's abi gate
runs natively against PyPI's real aarch64 torch 2.11.0 (tests/support/aarch64_cross.arm64_torch_site) with the
target's sysroot, and its import gate installs the glue and kernel wheels with this machine's real pip for their
platform (--platform TAG --target DIR --only-binary=:all: --no-deps) from a loopback index, then imports them
with Debian's arm64 python3.11 under qemu, that torch behind them (as verify_foreign does for conda packages).

The binaries are real aarch64 code, cross-compiled here with Debian's aarch64-linux-gnu-gcc: a glue extension that
imports a real c10 function (torchCheckFail, std::__cxx11::string: C++ ABI 1) from the aarch64 libc10.so and the kernel
library's C interface; a kernel library that needs the aarch64 libcudart.so.13 of NVIDIA's wheel; each with the RUNPATH
faforge.pipwheel.layout gives pip's layout, packed by faforge.pipwheel's writer with its manylinux tag. A gcc-built
kernel library holds no GPU code, so the kernel wheel's own abi gate fails, for that reason; its import gate installs it
the same way beside the aarch64 torch's CUDA runtime (nvidia/) and dlopen()s it under qemu, nothing preloaded.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.family import FLASH_ATTN
from faforge.pipwheel import layout
from faforge.pipwheel.manylinux import platform_tag
from faforge.pipwheel.writer import WheelSpec, write_wheel
from tests.support.aarch64_cross import CrossUnavailable, arm64_torch_site
from tests.support.cache import cache_dir
from tests.support.debian_toolchains import DebianUnavailable, arm64_plain_python

pytestmark = pytest.mark.slow

CC = "aarch64-linux-gnu-gcc"
VERSION = "2.8.3.post2"
KERNEL_LABEL = "cu130.sm80.philox64.h1234567"
EXTENSION = "flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so"
# A real c10 function of torch 2.11.0 (aarch64 libc10.so exports it), taking a std::__cxx11::string: C++ ABI 1.
C10_FUNCTION = "_ZN3c106detail14torchCheckFailEPKcS2_jRKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
GLUE_SOURCE = f"""
#include <Python.h>
extern void {C10_FUNCTION}(void);
extern int {FLASH_ATTN.kernel_api_prefix}set_cuda_error_handler(void *);
void *flash_attn_anchors[] = {{(void *) &{C10_FUNCTION},
                               (void *) &{FLASH_ATTN.kernel_api_prefix}set_cuda_error_handler}};
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "flash_attn_2_cuda", NULL, -1, NULL}};
PyMODINIT_FUNC PyInit_flash_attn_2_cuda(void) {{ return PyModule_Create(&module); }}
"""
KERNEL_SOURCE = f"""
extern int cudaGetLastError(void);
int {FLASH_ATTN.kernel_api_prefix}set_cuda_error_handler(void *handler) {{ (void) handler; return cudaGetLastError(); }}
void run_mha_fwd_tiny(void) {{}}
"""
VERIFY_CACHE = cache_dir("faforge")


def faforge(*args):
    env = dict(os.environ, FAFORGE_CACHE_DIR=str(VERIFY_CACHE))
    return subprocess.run(
        [sys.executable, "-m", "faforge", *map(str, args)], capture_output=True, text=True, env=env, timeout=2400
    )


def _cc(*args):
    subprocess.run([CC, "-shared", "-fPIC", "-O1", *map(str, args)], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    if platform.machine() != "x86_64" or not shutil.which(CC):
        pytest.skip(f"needs an x86_64 machine with {CC} (Debian gcc-aarch64-linux-gnu)")
    try:
        python = arm64_plain_python()
        site = arm64_torch_site("2.11.0", "3.11")
    except (DebianUnavailable, CrossUnavailable) as exc:
        pytest.skip(f"Debian's arm64 python3.11 / qemu-user-static, PyPI's aarch64 torch 2.11.0: {exc}")
    tmp = tmp_path_factory.mktemp("arm-wheels")
    (tmp / "kernel.c").write_text(KERNEL_SOURCE)
    (tmp / "glue.c").write_text(GLUE_SOURCE)
    kernel_lib, glue_ext = tmp / FLASH_ATTN.kernel_soname, tmp / EXTENSION
    # The RUNPATHs faforge.pipwheel.layout gives pip's layout (DT_RUNPATH: --enable-new-dtags).
    _cc(
        f"-Wl,-soname,{FLASH_ATTN.kernel_soname}",
        "-o",
        kernel_lib,
        tmp / "kernel.c",
        f"-L{site / 'nvidia/cu13/lib'}",
        "-l:libcudart.so.13",
        "-Wl,--enable-new-dtags,-rpath," + ":".join(layout.kernel_runpath("13.0")),
    )
    _cc(
        f"-I{python.include}",
        f"-I{python.python.parents[2] / 'usr/include'}",
        "-o",
        glue_ext,
        tmp / "glue.c",
        f"-L{site / 'torch/lib'}",
        "-lc10",
        f"-L{tmp}",
        f"-l:{FLASH_ATTN.kernel_soname}",
        "-Wl,--enable-new-dtags,-rpath," + ":".join(layout.glue_runpath("13.0")),
    )
    kernel_tag = platform_tag([kernel_lib]).tag
    glue_tag = platform_tag([glue_ext], inside=()).tag
    kernel_version = f"{VERSION}+{KERNEL_LABEL}"
    out = tmp / "wheels"
    kernel_wheel = write_wheel(
        WheelSpec(
            name=FLASH_ATTN.kernel_package,
            version=kernel_version,
            python_tags=("py3",),
            abi_tags=("none",),
            platform_tags=(kernel_tag,),
            files={
                f"{layout.KERNEL_DIR}/__init__.py": b"",
                f"{layout.KERNEL_DIR}/{FLASH_ATTN.kernel_soname}": kernel_lib,
            },
            build_tag="0",
            requires_python=">=3.9",
            requires_dist=("nvidia-cuda-runtime>=13.0,<14",),
        ),
        out,
    )
    glue_wheel = write_wheel(
        WheelSpec(
            name=FLASH_ATTN.package,
            version=f"{VERSION}+torch2.11.cu130.abi1",
            python_tags=("cp311",),
            abi_tags=("cp311",),
            platform_tags=(glue_tag,),
            files={"flash_attn/__init__.py": b'__version__ = "2.8.3.post2"\n', EXTENSION: glue_ext},
            build_tag="0h1234567",
            requires_python=">=3.11,<3.12",
            requires_dist=("torch>=2.11,<2.12", f"{FLASH_ATTN.kernel_package}=={kernel_version}", "einops"),
        ),
        out,
    )
    return python, site, glue_wheel, kernel_wheel, tmp


def test_an_aarch64_glue_wheel_abi_natively_and_import_under_qemu_from_the_loopback_index(arm):
    python, site, glue_wheel, kernel_wheel, tmp = arm
    run = faforge(
        "verify",
        glue_wheel,
        kernel_wheel,
        "--gates",
        "abi,import,gpu",
        "--against",
        site,
        "--manifest",
        tmp / "m",
        "--qemu",
        python.qemu,
        "--sysroot",
        python.sysroot,
        "--target-python",
        python.python,
        "--json",
    )
    assert run.stdout.strip(), run.stderr[-3000:]
    results = {(r["package"].split("-")[0], r["gate"]): r for r in json.loads(run.stdout)["results"]}
    abi, imported, gpu = (results["flash_attn", g] for g in ("abi", "import", "gpu"))
    assert abi["result"] == "passed", abi["detail"]
    assert (
        "against torch 2.11.0+cu130" in abi["detail"]
        and f"{FLASH_ATTN.kernel_soname} from {kernel_wheel.name}" in abi["detail"]
    )
    assert abi["cell"] == "pypi/linux-aarch64/py311/torch2.11/cu130/abi1"
    assert imported["result"] == "passed", imported["detail"]
    assert (
        "pip --platform manylinux_" in imported["detail"]
        and "from the loopback index http://127.0.0.1:" in imported["detail"]
    )
    assert (
        "emulated: qemu-aarch64-static -L" in imported["detail"]
        and "torch 2.11.0+cu130 on aarch64" in imported["detail"]
    )
    assert gpu["result"] == "skipped" and "GPU runner of that machine (aarch64)" in gpu["detail"]
    kernel_abi = results["libflash_attn_kernels", "abi"]
    assert kernel_abi["result"] == "failed" and "the arch list '80' needs sm_80" in kernel_abi["detail"], (
        "gcc put no GPU code in it: " + kernel_abi["detail"]
    )
    kernel_import = results["libflash_attn_kernels", "import"]
    assert kernel_import["result"] == "passed", kernel_import["detail"]
    assert (
        "nothing preloaded: its RUNPATH finds libcudart" in kernel_import["detail"]
        and "emulated: qemu-aarch64-static -L" in kernel_import["detail"]
    )
    assert f"beside the CUDA runtime of {site}/nvidia" in kernel_import["detail"]
    assert run.returncode == 1, "the kernel wheel's abi gate failed"


def test_without_the_aarch64_torch_the_abi_and_import_gates_are_skipped(arm):
    python, _, glue_wheel, kernel_wheel, tmp = arm
    run = faforge(
        "verify",
        glue_wheel,
        "--gates",
        "abi,import",
        "--manifest",
        tmp / "m2",
        "--qemu",
        python.qemu,
        "--sysroot",
        python.sysroot,
        "--target-python",
        python.python,
        "--json",
    )
    results = {r["gate"]: r for r in json.loads(run.stdout)["results"]}
    assert run.returncode == 3 and {r["result"] for r in results.values()} == {"skipped"}, run.stdout
    assert "no aarch64 torch to check against here" in results["abi"]["detail"]
    assert "no aarch64 torch to import beside" in results["import"]["detail"]
    assert kernel_wheel.parent == glue_wheel.parent, "found beside it"


def test_an_aarch64_glue_wheel_without_qemu_is_skipped_not_passed(arm, tmp_path):
    python, site, glue_wheel, _, _ = arm
    env = {
        "PATH": str(tmp_path),
        "HOME": str(Path.home()),
        "FAFORGE_TARGET_PYTHON": str(python.python),
        "FAFORGE_CACHE_DIR": str(VERIFY_CACHE),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "faforge",
            "verify",
            str(glue_wheel),
            "--gates",
            "import",
            "--against",
            str(site),
            "--manifest",
            str(tmp_path / "m"),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    result = json.loads(run.stdout)["results"][0]
    assert (
        run.returncode == 3
        and result["result"] == "skipped"
        and "qemu-aarch64 (or qemu-aarch64-static) is not on PATH" in result["detail"]
    )
