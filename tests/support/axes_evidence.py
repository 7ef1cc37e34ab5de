"""The legacy and aarch64 cells' real-sdist evidence, by hand, outside CI: `python -m tests.support.axes_evidence OUT`.

Kernel TUs take minutes each, so this is never a test. It compiles, on real upstream code (the
flash-attn 2.8.3.post2 sdist) and real torch builds:
  - one kernel TU of each class (fwd, fwd_split, bwd; hdim32 fp16) through the build backend
    (`build_flash_attn.py --kernels-only --only-tus`), with Debian's nvcc 12.4 in the conda layout the
    legacy world packages it in (the world.yaml entries whose payload is that toolchain), and cross for
    aarch64 with nvcc 13.0, aarch64-linux-gnu-g++ and the sbsa tree (tests/support/aarch64_cross.py);
  - the real glue (csrc/flash_attn/flash_api.cpp) for ABI 0 against PyPI's torch 2.5.1+cu124 and, cross,
    for aarch64 against PyPI's aarch64 torch 2.11.0, each checked by `faforge check-abi` against its own
    torch (expected to pass) and against another (expected to fail).
It prints one JSON object: per step the command's wall time, the tools nvcc ran (the backend's log),
the objects' ELF machine and GPU code, and check-abi's verdicts. Resumable: a step whose output exists
is not redone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import yaml

from faforge import paths
from faforge.abi import elf
from tests.conda_world.world import SPEC, download_wheels, load_spec, stage_payload
from tests.support.aarch64_cross import arm64_torch_site, sbsa_cuda_home
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import cuda_home
from tests.support.debian_toolchains import arm64_plain_python, ensure_unpacked

TUS = ("flash_fwd_hdim32_fp16_sm80.cu", "flash_fwd_split_hdim32_fp16_sm80.cu", "flash_bwd_hdim32_fp16_sm80.cu")
SDIST = Path("flash_attn-2.8.3.post2")  # the unpacked PyPI sdist (sha256 d0f9f0b0...340b), --sdist
SCRIPT = paths.recipe_dir() / "build_flash_attn.py"
CROSS_CXX = "aarch64-linux-gnu-g++"
TORCH_LIBRARIES = ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10_cuda", "-ltorch_cuda"]


def world_wheels() -> Path:
    """The conda world's PyPI wheels (a built world keeps only its packages: downloaded again when missing)."""
    root = cache_dir("conda-world") / "wheels"
    download_wheels(load_spec(), root, print)
    return root


def cuda_12_4_home(out: Path) -> Path:
    """Debian's CUDA 12.4 in conda's layout: every world.yaml payload of that toolchain, staged into one folder."""
    home = out / "cuda-12.4"
    if not (home / "bin/nvcc").is_file():
        for entry in _entries():
            payload = entry.get("payload") or {}
            if payload.get("kind") == "debian" and payload.get("toolchain") == "cuda-12.4":
                stage_payload(payload, home, world_wheels())
    # lib/libcudart.so links to libcudart.so.12, which the world takes from the nvidia channel's cuda-cudart
    # (a wheel payload); here, Debian's libcudart12 of the same 12.4.127.
    for runtime in (ensure_unpacked("cuda-12.4") / "usr/lib/x86_64-linux-gnu").glob("libcudart.so.12*"):
        if not os.path.lexists(home / "lib" / runtime.name):
            (home / "lib" / runtime.name).symlink_to(runtime.resolve())
    return home


def _entries() -> list[dict]:
    spec = yaml.safe_load(SPEC.read_text())
    return [entry for entries in spec["channels"].values() for entry in entries]


def kernel_tus(label: str, out: Path, env: dict[str, str], philox: str) -> dict:
    build = out / f"tus-{label}"
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--kernels-only",
            "--only-tus",
            ",".join(TUS),
            "--philox-offset-bits",
            philox,
            "--source-dir",
            str(SDIST),
            "--build-dir",
            str(build),
            "--archs",
            "80",
            "--max-jobs",
            "2",
            "--checker-path",
            str(paths.repo_root() / "scripts"),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    log = result.stdout + result.stderr
    (out / f"tus-{label}.log").write_text(log)
    objects = sorted((build / "kernels").rglob("*.o"))
    return {
        "exit": result.returncode,
        "wall_s": round(time.monotonic() - started, 1),
        "tools": [line.strip() for line in log.splitlines() if "runs " in line or line.strip().startswith("nvcc ")],
        "objects": {o.name: elf.read_info(o).machine for o in objects},
        "log_tail": log[-600:] if result.returncode else "",
    }


def check_abi(binary: Path, against: Path, extra: list[str] = ()) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "check-abi", str(binary), "--against", str(against), *extra, "--json"],
        capture_output=True,
        text=True,
    )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        return {"exit": result.returncode, "stderr": result.stderr[-400:]}
    problems = report.get("problems", [])
    # The glue links the kernel library's launches (run_mha_*), built apart (--kernels-only): missing here by design.
    kernel = [
        p
        for p in problems
        if p.get("kind") == "missing-symbol" and "run_mha_" in (p.get("demangled") or p.get("symbol") or "")
    ]
    others = [p for p in problems if p not in kernel]
    return {
        "exit": result.returncode,
        "torch": report.get("torch"),
        "declares": [m.get("declares") for m in report.get("modules", [])],
        "kernel_launches_missing": len(kernel),
        "other_problems": len(others),
        "other_kinds": sorted({p.get("kind") for p in others}),
        "examples": [(p.get("demangled") or p.get("symbol") or p.get("detail", ""))[:120] for p in others[:3]],
    }


def glue(label: str, out: Path, cxx: str, flags: list[str], libraries: list[str]) -> tuple[Path, dict]:
    """The real flash_api.cpp as a shared object: `flags` to compile, `libraries` after it (the
    toolchains link --as-needed, so libraries named before the source would be dropped)."""
    ext = out / f"glue-{label}" / "flash_attn_2_cuda.so"
    started = time.monotonic()
    if not ext.is_file():
        ext.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                cxx,
                "-shared",
                "-fPIC",
                "-O1",
                "-std=c++17",
                "-DTORCH_EXTENSION_NAME=flash_attn_2_cuda",
                "-DTORCH_API_INCLUDE_EXTENSION_H",
                f"-I{SDIST / 'csrc/flash_attn/src'}",
                f"-I{SDIST / 'csrc/cutlass/include'}",
                *flags,
                str(SDIST / "csrc/flash_attn/flash_api.cpp"),
                "-o",
                str(ext),
                *libraries,
            ],
            check=True,
        )
    return ext, {"wall_s": round(time.monotonic() - started, 1), "machine": elf.read_info(ext).machine}


def torch_wheel_tree(out: Path, pattern: str) -> Path:
    """torch/ of the world's cached PyPI wheel matching `pattern` (include/ and lib/ only)."""
    wheel = next(iter(sorted(world_wheels().rglob(pattern))))
    root = out / wheel.stem
    if not (root / "torch/lib").is_dir():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(
                root,
                [n for n in z.namelist() if n.startswith(("torch/include/", "torch/lib/")) or n == "torch/version.py"],
            )
    return root / "torch"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sdist", type=Path, required=True, help="the unpacked flash_attn-2.8.3.post2 sdist from PyPI")
    parser.add_argument("--steps", default="tus124,tuscross,glue0,gluecross")
    args = parser.parse_args(argv)
    global SDIST  # one sdist per run
    SDIST = args.sdist.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    steps, report = args.steps.split(","), {"machine": platform.machine(), "sdist": str(SDIST)}
    ninja = Path(shutil.which("ninja") or cache_dir("venvs") / "build-tools-py3.11/bin/ninja").parent
    clean_path = f"{ninja}:/usr/bin:/bin"  # no /usr/local/bin: its CUDA 13.0 tools must not be found by nvcc 12.4
    home124 = cuda_12_4_home(args.out) if {"tus124", "glue0"} & set(steps) else None
    torch_site = arm64_torch_site("2.11.0", "3.11")
    sbsa = sbsa_cuda_home(cuda_home(), torch_site / "nvidia/cu13")
    if "tus124" in steps:
        env = dict(os.environ, CUDA_HOME=str(home124), PREFIX=str(home124), PATH=clean_path)
        report["tus_nvcc_12.4"] = kernel_tus("nvcc12.4", args.out, env, "32")
    if "tuscross" in steps:
        env = dict(
            os.environ,
            target_platform="linux-aarch64",
            build_platform="linux-64",
            CXX=CROSS_CXX,
            CUDA_HOME=str(sbsa),
            PATH=f"{ninja}:{os.environ['PATH']}",
        )
        report["tus_cross_aarch64"] = kernel_tus("cross", args.out, env, "64")
    if "glue0" in steps:
        torch251 = torch_wheel_tree(args.out, "torch-2.5.1-cp312-*.whl")  # PyPI's 2.5.1 is +cu124, pre-C++11 ABI
        py = Path(sys.base_prefix) / "include" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
        ext, info = glue(
            "abi0",
            args.out,
            "g++",
            [
                "-D_GLIBCXX_USE_CXX11_ABI=0",
                f"-I{torch251 / 'include'}",
                f"-I{torch251 / 'include/torch/csrc/api/include'}",
                f"-I{py}",
                f"-I{home124 / 'targets/x86_64-linux/include'}",
            ],
            [f"-L{torch251 / 'lib'}", *TORCH_LIBRARIES],
        )
        other = torch_wheel_tree(args.out, "torch-2.11.0-cp312-*.whl")
        runtime = [
            "--library-dir",
            str(home124 / "lib"),
        ]  # libcudart.so.12 (12.4.127), which PyPI's torch takes from nvidia-* wheels
        info["check_abi"] = {
            "own torch 2.5.1": check_abi(ext, torch251 / "lib", runtime),
            "torch 2.11.0 (C++11 ABI, another minor)": check_abi(ext, other / "lib", runtime),
        }
        report["glue_abi0"] = info
    if "gluecross" in steps:
        python = arm64_plain_python()
        torch = torch_site / "torch"
        ext, info = glue(
            "aarch64",
            args.out,
            CROSS_CXX,
            [
                "-D_GLIBCXX_USE_CXX11_ABI=1",
                f"-I{torch / 'include'}",
                f"-I{torch / 'include/torch/csrc/api/include'}",
                f"-I{python.include}",
                f"-I{python.python.parents[1] / 'include'}",
                f"-I{sbsa / 'targets/sbsa-linux/include'}",
            ],
            [f"-L{torch / 'lib'}", *TORCH_LIBRARIES],
        )
        older = arm64_torch_site("2.10.0", "3.11") / "torch"
        sysroot = ["--library-dir", "/usr/aarch64-linux-gnu/lib"]
        info["check_abi"] = {
            "own aarch64 torch 2.11.0+cu130": check_abi(ext, torch_site, sysroot),
            "aarch64 torch 2.10.0 (PyPI's aarch64 default: +cpu, another minor)": check_abi(ext, older.parent, sysroot),
        }
        report["glue_aarch64"] = info
    print(json.dumps(report, indent=1))
    (args.out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
