"""`faforge doctor` on real broken FlashAttention-4 environments, and the line it prints, run.

Each environment: a fresh venv whose site-packages reaches PyPI's torch 2.14.1+cu130 (tests/support/torch_envs.py)
through a .pth file, as tests/doctor/test_fa3.py's do, with flash-attn-4 4.0.0b40 and its known-good set installed
from the real PyPI wheels (cached under the test cache's fa4-wheels, about 300 MB), then broken as users break it:
- nvidia-cutlass-dsl 4.6.1 (below b40's floor >=4.6.2) under quack-kernels 0.6.5, which needs the DSL's
  `cutlass.base_dsl.enums` (4.7+): `import flash_attn.cute` fails with the real ModuleNotFoundError;
- quack-kernels 0.6.2 with the nvidia-cutlass-dsl 4.6.1 it pins (what `pip install quack-kernels==0.6.2` brings):
  the import still works, the set does not hold (b40 and quack 0.6.2 can never co-resolve);
- apache-tvm-ffi uninstalled: `No module named 'tvm_ffi'`.
Then the fix's line runs verbatim (pip, with the cached wheels as find-links beside PyPI), and doctor says healthy
and the import works. The torch venv is shared: pip leaves its packages alone (outside the environment), checked.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from faforge.family import FLASH_ATTN_4
from tests.support.cache import cache_dir
from tests.support.held_torch import UV, uv_env
from tests.support.torch_envs import TorchEnvUnavailable, torch_env

pytestmark = pytest.mark.slow
WHEELS = cache_dir("fa4-wheels")
SET = [
    "flash-attn-4==4.0.0b40",
    "nvidia-cutlass-dsl==4.8.1",
    "nvidia-cutlass-dsl-libs-base==4.8.1",
    "nvidia-cutlass-dsl-libs-core==4.8.1",
    "nvidia-cutlass-dsl-libs-cu12==4.8.1",
    "nvidia-cutlass-dsl-libs-cu13==4.8.1",
    "cuda-bindings==13.5.0",
    "cuda-pathfinder==1.9.1",
    "quack-kernels==0.6.5",
    "apache-tvm-ffi==0.1.15.post2",
    "torch-c-dlpack-ext==0.1.5",
    "einops==0.8.2",
    "packaging==25.0",
    "typing-extensions==4.15.0",
    "protobuf==7.36.2",  # nvidia-cutlass-dsl-libs-core's (>=4.21.12)
]
OLD_CUTLASS = [f"nvidia-cutlass-dsl{part}==4.6.1" for part in ("", "-libs-base", "-libs-core", "-libs-cu12")]
NUMPY = "numpy==2.4.6"  # nvidia-cutlass-dsl-libs-base 4.6.1 requires and imports numpy (4.8 does not)


def download(python: Path, requirements: list[str]) -> None:
    """The real PyPI wheels, once (pip download; two calls: the two quack versions cannot resolve together)."""
    command = [str(python), "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", str(WHEELS)]
    subprocess.run([*command, *requirements], check=True, timeout=1800)


@pytest.fixture
def torch(tmp_path):
    try:
        found = torch_env("2.14.1")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    wanted = "\n".join([*SET, "quack-kernels==0.6.2", NUMPY, *OLD_CUTLASS]) + "\n"
    done = WHEELS / ".complete"  # the requirements downloaded, so a changed list downloads again
    if not done.exists() or done.read_text() != wanted:
        WHEELS.mkdir(parents=True, exist_ok=True)
        download(found.python, SET)
        download(found.python, ["quack-kernels==0.6.2", NUMPY, *OLD_CUTLASS])
        done.write_text(wanted)
    return found


def uv(python: Path, command: str, *args: str) -> None:
    """uv pip `command` into `python`'s venv; an install takes the cached wheels only, without their dependencies."""
    local = ["--no-deps", "--no-index", "--find-links", str(WHEELS)] if command == "install" else []
    run = subprocess.run(
        [str(UV), "pip", command, "--python", str(python), *local, *args], capture_output=True, text=True, env=uv_env()
    )
    assert run.returncode == 0, run.stderr[-2000:]


def fa4_env(root: Path, torch) -> Path:
    """A venv reaching torch by .pth, with FA4 b40 and its set from the cached PyPI wheels; returns its python."""
    subprocess.run([str(torch.python.resolve()), "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    (site / "faforge-test.pth").write_text(f"{torch.site_packages}\n")
    python = root / "bin" / "python"
    uv(python, "install", *SET)
    return python


def doctor(run_doctor, python: Path, code: int | None = None) -> dict:
    """The FA4 section of `faforge doctor --json` (run_doctor: no traceback, the schema holds), and its exit code."""
    run = run_doctor("--python", python)
    assert code is None or run.code == code, (run.code, run.stderr[-2000:])
    return run.report[FLASH_ATTN_4.key]


def imports(python: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", f"import {FLASH_ATTN_4.module}"], capture_output=True, text=True)


def heal_and_check(run_doctor, python: Path, section: dict, torch) -> None:
    """Run the section's line verbatim; then doctor says healthy, the import works and the shared torch is as it was."""
    (fix,) = section["fixes"]
    (line,) = fix["commands"]
    assert line.startswith(f"{python} -m pip install torch==2.14.1 {FLASH_ATTN_4.package}==4.0.0b40 "), line
    before = sorted(p.name for p in torch.site_packages.glob("*.dist-info"))
    env = {**os.environ, "PIP_FIND_LINKS": f"/opt/wheels {WHEELS}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    run = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, timeout=1800)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert sorted(p.name for p in torch.site_packages.glob("*.dist-info")) == before
    healed = doctor(run_doctor, python, 0)
    assert healed["healthy"] and healed["fixes"] == [], healed["problems"]
    assert [p["kind"] for p in healed["problems"]] == ["no-gpu"] and healed["import"] == {"ok": True, "error": None}
    assert imports(python).returncode == 0


def test_a_cutlass_dsl_below_fa4s_floor_breaks_the_import_and_the_line_heals_it(tmp_path, torch, run_doctor):
    python = fa4_env(tmp_path / "venv", torch)
    uv(python, "install", NUMPY, *OLD_CUTLASS)
    assert "No module named 'cutlass.base_dsl.enums'" in imports(python).stderr  # the real breakage
    section = doctor(run_doctor, python, 1)
    assert not section["healthy"] and section["version"] == "4.0.0b40" and section["layout"] == "FA4 only"
    messages = [p["message"] for p in section["problems"]]
    floor = "nvidia-cutlass-dsl 4.6.1 is outside flash-attn-4's requirement >=4.6.2 and outside the set (4.8.1)"
    assert floor in messages
    assert "nvidia-cutlass-dsl-libs-base 4.6.1 is outside the set (4.8.1)" in messages
    assert section["import"]["error"] == "ModuleNotFoundError: No module named 'cutlass.base_dsl.enums'"
    heal_and_check(run_doctor, python, section, torch)


def test_quack_kernels_0_6_2_with_the_cutlass_it_pins_is_outside_the_set_and_healed(tmp_path, torch, run_doctor):
    python = fa4_env(tmp_path / "venv", torch)
    uv(python, "install", NUMPY, "quack-kernels==0.6.2", *OLD_CUTLASS)
    section = doctor(run_doctor, python, 1)
    messages = [p["message"] for p in section["problems"]]
    assert "quack-kernels 0.6.2 is outside the set (0.6.5)" in messages and not section["healthy"]
    assert section["dependencies"]["quack-kernels"] == {"installed": "0.6.2", "set": "0.6.5"}
    heal_and_check(run_doctor, python, section, torch)


def test_a_missing_dependency_is_named_and_healed_and_fa4_alone_is_a_namespace_package(tmp_path, torch, run_doctor):
    python = fa4_env(tmp_path / "venv", torch)
    uv(python, "uninstall", "apache-tvm-ffi")
    section = doctor(run_doctor, python, 1)
    assert "apache-tvm-ffi is not installed (the set has 0.1.15.post2)" in [p["message"] for p in section["problems"]]
    assert section["import"]["error"] == "ModuleNotFoundError: No module named 'tvm_ffi'"
    assert section["layout"] == "FA4 only" and section["beside"] is None
    heal_and_check(run_doctor, python, section, torch)


def test_beside_flash_attn_2_the_package_is_flash_attn_2s_and_doctor_says_fa2_plus_fa4(tmp_path, torch, run_doctor):
    """flash-attn 2 as a stand-in: its flash_attn/__init__.py and its dist-info, as its wheel installs them."""
    python = fa4_env(tmp_path / "venv", torch)
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    (site / "flash_attn" / "__init__.py").write_text('__version__ = "2.8.3"\n')
    info = site / "flash_attn-2.8.3.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flash_attn\nVersion: 2.8.3\n")
    section = doctor(run_doctor, python)  # its exit: flash-attn 2 stand-in has no extension
    assert section["layout"] == "FA2 + FA4" and section["beside"] == "2.8.3" and section["healthy"], section
    # flash-attn 2's __init__ runs first on `import flash_attn.cute`: where it fails, FA4 fails with it, and says where
    (site / "flash_attn" / "__init__.py").write_text(
        "raise ImportError('flash_attn_2_cuda: undefined symbol: _ZN3c10')\n"
    )
    broken = doctor(run_doctor, python)
    (problem,) = [p for p in broken["problems"] if p["kind"] == "import-failed"]
    assert problem["details"] == [f"at {site / 'flash_attn' / '__init__.py'}:1"], problem
    assert broken["layout"] == "FA2 + FA4" and broken["import"]["error"].endswith("undefined symbol: _ZN3c10")


def test_a_torch_without_a_set_is_named_with_the_sets_that_exist(tmp_path, torch, run_doctor):
    """PyPI's torch 2.13.0 CPU build: no set (FA4's compiled stack is gated with 2.11 and 2.14 on CUDA 13.0), and no
    triton, which quack imports undeclared, so the import fails too. The line moves to the newest set's torch."""
    try:
        cpu = torch_env("2.13.0")
    except TorchEnvUnavailable as exc:
        pytest.skip(str(exc))
    python = fa4_env(tmp_path / "venv", cpu)
    section = doctor(run_doctor, python, 1)
    (problem,) = [p for p in section["problems"] if p["kind"] == "no-known-good-set"]
    assert "torch 2.13.0+cpu (CUDA none: a CPU build)" in problem["message"], problem
    assert "torch 2.11 with CUDA 13.0, torch 2.14 with CUDA 13.0" in problem["message"]
    assert (
        section["known_good_set"] is None
        and section["import"]["error"] == "ModuleNotFoundError: No module named 'triton'"
    )
    (fix,) = section["fixes"]
    assert "torch==2.14.*" in fix["commands"][0] and "triton==3.8.0" in fix["commands"][0]
