"""`faforge verify` of a linux-aarch64 flash-attn on this x86_64 machine (the aarch64 cells): the abi gate runs
natively against the aarch64 torch with the target's sysroot; the import gate runs the package under
qemu with an aarch64 Python and says it ran emulated, or is `skipped` with the reason when qemu is
missing (never passed); the gpu gate is left to an aarch64 GPU runner.

The package is real aarch64 code: an extension module cross-compiled with Debian's aarch64-linux-gnu-gcc
against Debian's arm64 Python 3.11 headers, needing a stand-in torch's libc10.so (aarch64 too), which the
stand-in torch package loads as torch does. The Python is Debian's arm64 python3.11 as a plain prefix
(tests/support/debian_toolchains.py); qemu is Debian's qemu-user-static, named by --qemu.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faforge.channel.local import PackageSpec, assemble
from tests.support.debian_toolchains import DebianUnavailable, arm64_plain_python
from tests.support.tiers import slow

BUILD = "py311_torch2_11_cu130_cxx11abi1_h1234567_0"
SITE = "lib/python3.11/site-packages"
EXTENSION = "flash_attn_2_cuda.cpython-311-aarch64-linux-gnu.so"
EXTENSION_SOURCE = """
#include <Python.h>
extern void c10_anchor(void);
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "flash_attn_2_cuda", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_flash_attn_2_cuda(void) { c10_anchor(); return PyModule_Create(&module); }
"""
TORCH_INIT = """import ctypes, os
__version__ = "2.11.0+cu130"
ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libc10.so"), mode=ctypes.RTLD_GLOBAL)
"""


def faforge(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "faforge", *args], capture_output=True, text=True, timeout=900, env=env
    )


def _gcc(*args):
    subprocess.run(
        ["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-O1", *args], check=True, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
@slow("Debian's arm64 Python under qemu")
def arm(tmp_path_factory):
    if platform.machine() != "x86_64" or not shutil.which("aarch64-linux-gnu-gcc"):
        pytest.skip("needs an x86_64 machine with aarch64-linux-gnu-gcc (Debian gcc-aarch64-linux-gnu)")
    try:
        python = arm64_plain_python()
    except DebianUnavailable as exc:
        pytest.skip(f"Debian's arm64 python3.11 / qemu-user-static: {exc}")
    tmp = tmp_path_factory.mktemp("arm")
    torch = tmp / "site/torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "__init__.py").write_text(TORCH_INIT)
    (torch / "version.py").write_text("__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    (tmp / "c10.c").write_text("void c10_anchor(void) {}\n")
    _gcc("-Wl,-soname,libc10.so", "-o", str(torch / "lib/libc10.so"), str(tmp / "c10.c"))
    (tmp / "ext.c").write_text(EXTENSION_SOURCE)
    root = python.python.parents[2]
    _gcc(
        f"-I{python.include}",
        f"-I{root / 'usr/include'}",
        "-o",
        str(tmp / EXTENSION),
        str(tmp / "ext.c"),
        f"-L{torch / 'lib'}",
        "-lc10",
    )
    package = assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            BUILD,
            "linux-aarch64",
            depends=("python 3.11.*", "pytorch >=2.11.0,<2.12 cuda130*"),
            files={
                f"{SITE}/flash_attn/__init__.py": "import flash_attn_2_cuda\n",
                f"{SITE}/{EXTENSION}": (tmp / EXTENSION).read_bytes(),
            },
        ),
        tmp / "out",
    )
    return python, package, tmp / "site", tmp


def _results(result):
    assert result.returncode in (0, 1, 3), result.stderr
    return {r["gate"]: (r["result"], r["detail"]) for r in json.loads(result.stdout)["results"]}


def test_the_import_gate_runs_under_qemu_and_says_so(arm):
    python, package, site, tmp = arm
    result = faforge(
        "verify",
        str(package),
        "--gates",
        "abi,import,gpu",
        "--against",
        str(site),
        "--manifest",
        str(tmp / "v1"),
        "--qemu",
        str(python.qemu),
        "--sysroot",
        str(python.sysroot),
        "--target-python",
        str(python.python),
        "--json",
    )
    gates = _results(result)
    assert gates["abi"][0] == "passed", gates["abi"]
    assert gates["import"][0] == "passed", gates["import"]
    assert (
        "emulated: qemu-aarch64-static -L" in gates["import"][1]
        and "torch 2.11.0+cu130 on aarch64" in gates["import"][1]
    )
    assert gates["gpu"][0] == "skipped" and "GPU runner of that machine (aarch64" in gates["gpu"][1]
    assert result.returncode == 3  # gpu not verified here


def test_a_module_that_cannot_load_fails_the_emulated_import(arm, tmp_path):
    python, _, site, _ = arm
    (tmp_path / "bad.c").write_text(
        EXTENSION_SOURCE.replace("c10_anchor();", "c10_gone();").replace("c10_anchor(void)", "c10_gone(void)")
    )
    _gcc(
        f"-I{python.include}",
        f"-I{python.python.parents[2] / 'usr/include'}",
        "-o",
        str(tmp_path / EXTENSION),
        str(tmp_path / "bad.c"),
    )
    bad = assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            BUILD,
            "linux-aarch64",
            depends=("python 3.11.*",),
            files={
                f"{SITE}/flash_attn/__init__.py": "import flash_attn_2_cuda\n",
                f"{SITE}/{EXTENSION}": (tmp_path / EXTENSION).read_bytes(),
            },
        ),
        tmp_path / "out",
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "FAFORGE_QEMU": str(python.qemu),
        "FAFORGE_SYSROOT": str(python.sysroot),
        "FAFORGE_TARGET_PYTHON": str(python.python),
        "HOME": str(Path.home()),
    }
    gates = _results(
        faforge(
            "verify",
            str(bad),
            "--gates",
            "import",
            "--against",
            str(site),
            "--manifest",
            str(tmp_path / "v"),
            "--json",
            env=env,
        )
    )
    assert gates["import"][0] == "failed" and "c10_gone" in gates["import"][1] and "emulated:" in gates["import"][1]


def test_without_qemu_the_import_gate_is_skipped_with_the_reason(arm, tmp_path):
    python, package, site, _ = arm
    env = {"PATH": str(tmp_path), "HOME": str(Path.home()), "FAFORGE_TARGET_PYTHON": str(python.python)}
    result = faforge(
        "verify",
        str(package),
        "--gates",
        "import",
        "--against",
        str(site),
        "--manifest",
        str(tmp_path / "v"),
        "--json",
        env=env,
    )
    gates = _results(result)
    assert (
        gates["import"][0] == "skipped" and "qemu-aarch64 (or qemu-aarch64-static) is not on PATH" in gates["import"][1]
    )
    assert result.returncode == 3


def test_a_target_python_of_the_wrong_machine_is_bad_input(arm, tmp_path):
    python, package, site, _ = arm
    result = faforge(
        "verify",
        str(package),
        "--gates",
        "import",
        "--against",
        str(site),
        "--manifest",
        str(tmp_path / "v"),
        "--qemu",
        str(python.qemu),
        "--target-python",
        sys.executable,
    )
    assert (
        result.returncode == 2
        and f"an ELF program for {platform.machine()}, not a Python interpreter for aarch64" in result.stderr
    )
