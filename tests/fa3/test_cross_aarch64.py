"""flash-attn-3 for linux-aarch64, cross-built on this x86_64 machine (the aarch64 cross build's fallback path).

The tiny FA3-shaped tree (tests/support/fa3_tree.py) goes through recipes/flash-attn-3/build_flash_attn_3.py
with target_platform=linux-aarch64: nvcc 13.0 with -ccbin aarch64-linux-gnu-g++ and -target-dir
sbsa-linux, the glue against PyPI's aarch64 torch 2.11.0+cu130 and Debian's arm64 Python headers, linked
against the target's libcudart (the first real FA3 cross build failed there). The package then passes
`faforge verify`: the stable-ABI gate natively against the aarch64 torch (one release of its range, so
`skipped` with what is missing, and the load named), the import under qemu, the gpu gate skipped.
The real trimmed FA3 build took the same path (its numbers are in the README's changelog).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from faforge import paths
from faforge.abi import elf
from faforge.channel.local import PackageSpec, assemble
from faforge.families.flash_attn_3 import backend as fa3
from faforge.families.flash_attn_3.matrix import packages_of
from faforge.family import FLASH_ATTN_3
from faforge.matrix import load_matrix
from tests.backend.test_cross_aarch64_real import CXX, cross  # noqa: F401  (the module's fixture: toolkit, torch, python)
from tests.support.fa3_tree import fa3_shaped_tree

pytestmark = pytest.mark.slow
SCRIPT = paths.repo_root() / FLASH_ATTN_3.recipe_dir / FLASH_ATTN_3.build_script
DISABLED = (
    "BACKWARD,SPLIT,PAGEDKV,APPENDKV,LOCAL,SOFTCAP,PACKGQA,FP8,VARLEN,CLUSTER,"
    "HDIM64,HDIM96,HDIM192,HDIM256,HDIMDIFF64,HDIMDIFF192,SM8x"
)


def test_cross_build_stable_gate_and_emulated_import(cross):  # noqa: F811 (an imported fixture, requested by name)
    tmp, tools = cross
    home, torch_site, python, ninja_dir = tools.cuda_home, tools.torch_site, tools.python, tools.ninja_dir
    tree = fa3_shaped_tree(tmp / "fa3-src", fa3.parse_disabled(DISABLED))
    site = tmp / "fa3-site"
    env = dict(
        os.environ,
        target_platform="linux-aarch64",
        build_platform="linux-64",
        CXX=CXX,
        CUDA_HOME=str(home),
        PATH=f"{ninja_dir}:{os.environ['PATH']}",
    )
    built = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--source-dir",
            str(tree),
            "--archs",
            "90a",
            "--disable",
            DISABLED,
            "--build-dir",
            str(tmp / "fa3-build"),
            "--install-dir",
            str(site),
            "--torch-dir",
            str(torch_site / "torch"),
            "--python-include",
            str(python.include),
            "--python-include",
            str(python.include.parent),
            "--max-jobs",
            "1",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    assert f"-ccbin {CXX} -target-dir sbsa-linux" in (tmp / "fa3-build/build.ninja").read_text()
    extension = site / FLASH_ATTN_3.module / fa3.EXTENSION
    assert elf.read_info(extension).machine == "aarch64"

    head = next(p for p in packages_of(load_matrix()) if p.id == "linux-aarch64/cu130/sm80_90a").build_string_head
    files = {
        f"lib/python3.10/site-packages/{p.relative_to(site)}": p.read_bytes() for p in site.rglob("*") if p.is_file()
    }
    package = assemble(
        PackageSpec(
            FLASH_ATTN_3.package,
            "3.0.0",
            f"{head}_faforge_h1a2b3c4_0",
            "linux-aarch64",
            depends=("python >=3.10", "pytorch >=2.9 cuda*", "cuda-version >=13.0,<14"),
            files=files,
        ),
        tmp / "fa3-out",
    )
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
            str(tmp / "fa3-verification"),
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
    gates = {r["gate"]: (r["result"], r["detail"]) for r in json.loads(verified.stdout)["results"]}
    print(json.dumps(gates, indent=1))
    assert verified.returncode == 3, verified.stderr[-2000:]
    assert (
        gates["abi"][0] == "skipped"
        and "loads on torch 2.11.0+cu130" in gates["abi"][1]
        and "2.10 to 2.13" in gates["abi"][1]
    )
    assert gates["import"][0] == "passed" and "on aarch64 (emulated: qemu-aarch64" in gates["import"][1], gates[
        "import"
    ]
    assert (
        f"imported {FLASH_ATTN_3.module}, {FLASH_ATTN_3.extension}, {FLASH_ATTN_3.interface_module}"
        in gates["import"][1]
    )
    assert gates["gpu"][0] == "skipped"
