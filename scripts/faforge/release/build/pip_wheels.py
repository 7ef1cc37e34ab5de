"""Steps 2 and 3 of one pip cell's build (faforge.release.build.pip): the raw glue compiled against the cell's PyPI
torch, then the kernel wheel and the glue wheel made from it and the kernel package.

The glue: recipes/flash-attn/build_flash_attn.py --kernel-library <the kernel package's library>, run by the
Python of the cached base venv of the cell's torch (faforge.release.clean_env, the one verify's import gate
uses) with the build tools layered on through PYTHONPATH, or for a linux-aarch64 cell cross-built against the
--torch-site torch; its log goes to a file, the backend's own step lines to the terminal. The wheels: the kernel
wheel is the kernel package's library with only its RUNPATH set (faforge.pipwheel.kernel), the glue wheel the raw
wheel with its pip identity (faforge.pipwheel.glue); their names must be the ones the matrix gives them.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from faforge import paths
from faforge.abi.elf import read_info
from faforge.backend.logger import PREFIX as BACKEND_LOG_PREFIX
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN
from faforge.matrix.pip_builds import PipBuild
from faforge.release import clean_env
from faforge.release.build.pip_inputs import WHEEL_DIR, WheelWhere, cuda_toolkit, unpack_sdist
from faforge.release.build.pip_target import CROSS_MACHINE
from faforge.release.package import read_package
from faforge.release.reporter import Reporter
from faforge.release.venv_cache import cached_venv

if TYPE_CHECKING:
    from faforge.pipwheel.built import BuiltWheel

# The build tools the glue's build needs beside torch (recipes/flash-attn/recipe.yaml's host requirements of the
# flash-attn output: ninja for torch's cpp_extension, setuptools and wheel for the wheel, pyelftools for the
# backend's ABI check after the link), in a cached venv of their own, so that the torch venv stays verify's.
BUILD_TOOLS = ("ninja", "pyelftools", "setuptools<82", "wheel")
GLUE_TIMEOUT_S = 3 * 3600
# The build script's own lines, shown live: its steps (`[build_flash_attn] ...`) and its error
# (`build_flash_attn: error: ...`).
BACKEND_LINES = (BACKEND_LOG_PREFIX, f"{Path(FLASH_ATTN.build_script).stem}:")


def build_tools_venv(python: str, say: Callable[[str], None]) -> Path:
    """The cached venv of the glue build's tools (BUILD_TOOLS) for CPython `python`; its site-packages."""
    prefix = cached_venv(
        "build-tools", f"pip-glue-py{python}", python, list(BUILD_TOOLS), "the glue build's tools", say
    )
    return next((prefix / "lib").glob("python3*/site-packages"))


def run_logged(command: list[str], env: dict, log: TextIO, report: Reporter, title: str, timeout: int) -> int:
    """Run `command`, every line to the log, the backend's own step lines (`build_flash_attn:`) to the terminal."""
    report.say(f"+ {shlex.join(command)}")
    log.write(f"+ {shlex.join(command)}\n")
    log.flush()
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, errors="replace"
    ) as proc:
        watchdog = threading.Timer(timeout, proc.kill)  # a silent hang ends too
        watchdog.start()
        try:
            assert proc.stdout is not None  # opened with stdout=PIPE
            for line in proc.stdout:
                log.write(line)
                if line.startswith(BACKEND_LINES) or "error" in line.lower():
                    report.say(f"  {title}: {line.rstrip()[:300]}")
            code = proc.wait()
        finally:
            watchdog.cancel()
        if code < 0:
            log.write(f"killed (signal {-code}) after at most {timeout} s\n")
        return code


def glue_env(tools_site: Path, cuda_home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "FAFORGE_BUILD_TUS")}
    env["PYTHONPATH"] = str(tools_site)
    env["PATH"] = os.pathsep.join([str(tools_site.parents[2] / "bin"), env.get("PATH", "")])
    env["CUDA_HOME"] = str(cuda_home)
    return env


def torch_metadata(site: Path) -> Path:
    found = sorted(site.glob("torch-*.dist-info/METADATA"))
    if len(found) != 1:
        raise FaforgeError(
            f"{site}: {len(found)} torch METADATA files, not one", hint="remove the cached venv so it is made anew"
        )
    return found[0]


def wheel_json(built: BuiltWheel, was: dict | None = None) -> dict:
    facts = built.facts
    out = {
        "path": str(built.path),
        "filename": facts.filename,
        "version": facts.version,
        "build_tag": facts.build_tag,
        "platform_tag": built.verdict.tag,
        "sha256": facts.sha256,
        "size": facts.size,
        "runpath": list(built.runpath),
        "requires_dist": list(facts.requires_dist),
        "seconds": round(built.seconds, 3),
    }
    return out | ({"was": was} if was is not None else {})


def make_wheels(
    build: PipBuild,
    kernel: Path,
    kernel_from: str,
    where: WheelWhere,
    report: Reporter,
    title: str,
    log: TextIO,
    work: Path,
    sdist: Path,
) -> dict:
    """Steps 2 and 3 for one cell, its kernel package found; the --json `wheel` object."""
    from faforge.pipwheel.facts import requires_dist_of  # noqa: PLC0415 (pip cells only)
    from faforge.pipwheel.glue import GlueCell, repack_glue_wheel  # noqa: PLC0415 (pip cells only)
    from faforge.pipwheel.kernel import (  # noqa: PLC0415 (pip cells only)
        pack_kernel_wheel,
        runtime_range_of_kernel_wheel,
        unpack_kernel_package,
    )

    cell = build.cell
    steps = {}
    dist = where.output_dir / WHEEL_DIR
    dist.mkdir(parents=True, exist_ok=True)
    cuda_home = cuda_toolkit(where.cuda_home, cell.cuda)
    started = time.monotonic()
    tools = build_tools_venv(cell.python, report.say)
    if (
        where.cross
    ):  # linux-aarch64: the target torch read from its files, the glue script run by the tools venv's Python
        target = where.cross
        torch_version, torch_site, python = target.torch, target.torch_site, tools.parents[2] / "bin" / "python"
        target_args = [
            "--torch-site",
            str(target.torch_site),
            *(a for d in target.python_includes for a in ("--python-include", d)),
        ]
        target_env = {"target_platform": cell.platform, "build_platform": clean_env.MACHINE_SUBDIRS[CROSS_MACHINE]}
    else:
        venv = clean_env.pypi_torch_venv(f"=={cell.torch}", cell.python, clean_env.BASE_EXTRAS, announce=report.say)
        if (venv.torch.split("+")[0], venv.cuda, venv.cxx11_abi) != (cell.torch, cell.cuda, cell.cxx11_abi):
            raise FaforgeError(
                f"{cell.id}: PyPI's torch=={cell.torch} in {venv.prefix} is {venv.torch} for CUDA {venv.cuda}, C++ ABI "
                f"{venv.cxx11_abi}; the cell says CUDA {cell.cuda}, ABI {cell.cxx11_abi}",
                exit_code=EXIT_PROBLEMS,
                hint="the pypi world's row in variants/releases.yaml disagrees with PyPI: `faforge bump --source pypi`",
            )
        torch_version, torch_site, python, target_args, target_env = venv.torch, venv.site_packages, venv.python, [], {}
    steps["venvs"] = time.monotonic() - started
    kernel_facts = read_package(kernel)
    package = unpack_kernel_package(
        kernel,
        work / "kernel-package",
        report.say,
        name=kernel_facts.name,
        version=kernel_facts.version,
        build=kernel_facts.build,
        subdir=kernel_facts.subdir,
    )
    src = unpack_sdist(sdist, work / "sdist")
    started = time.monotonic()
    command = [
        str(python),
        str(paths.recipe_dir() / FLASH_ATTN.build_script),
        "--kernel-library",
        str(package.library),
        *target_args,
        "--source-dir",
        str(src),
        "--build-dir",
        str(work / "build"),
        "--wheel-dir",
        str(work / "raw"),
        "--archs",
        cell.cuda_archs,
        "--cxx11-abi",
        str(cell.cxx11_abi),
        "--max-jobs",
        "1",
        "--checker-path",
        str(paths.repo_root() / "scripts"),
    ]
    code = run_logged(command, glue_env(tools, cuda_home) | target_env, log, report, title, GLUE_TIMEOUT_S)
    steps["glue"] = time.monotonic() - started
    raws = sorted((work / "raw").glob("*.whl"))
    if code != 0 or len(raws) != 1:
        raise FaforgeError(
            f"{cell.id}: {FLASH_ATTN.build_script} failed (exit {code})"
            if code
            else f"{cell.id}: {FLASH_ATTN.build_script} wrote {len(raws)} wheels, not one",
            exit_code=EXIT_PROBLEMS,
            hint=f"see the log {log.name}",
        )
    started = time.monotonic()
    requirement = runtime_range_of_kernel_wheel(cell.cuda, requires_dist_of(torch_metadata(torch_site)))
    original = read_info(package.library)
    was = {"rpath": list(original.rpath), "runpath": list(original.runpath)}
    kernel_wheel = pack_kernel_wheel(
        package,
        runtime_requirement=requirement,
        out_dir=dist,
        work=work / "kernel-wheel",
        say=report.say,
    )
    report.say(
        f"  {title}: kernel wheel {kernel_wheel.path.name}: the "
        "kernel package's library, byte for byte but for its RUNPATH "
        f"(RPATH {':'.join(original.rpath) or '-'} -> RUNPATH "
        f"{':'.join(kernel_wheel.runpath)}, patchelf); no kernel TU compiled for pip"
    )
    glue = repack_glue_wheel(
        raws[0],
        cell=GlueCell(
            torch=cell.torch_minor,
            cuda=cell.cuda,
            cxx11_abi=cell.cxx11_abi,
            python=cell.python,
            build_tag=build.build_string,
        ),
        kernel_wheel=kernel_wheel.path,
        out_dir=dist,
        work=work / "glue-wheel",
        say=report.say,
    )
    steps["wheels"] = time.monotonic() - started
    expected = (build.glue_wheel(glue.verdict.tag), build.kernel_wheel(kernel_wheel.verdict.tag))
    if (glue.path.name, kernel_wheel.path.name) != expected:
        raise FaforgeError(
            f"{cell.id}: the wheels are {glue.path.name} and {kernel_wheel.path.name}, the matrix names them "
            f"{expected[0]} and {expected[1]}",
            exit_code=EXIT_PROBLEMS,
            hint="faforge.matrix.pip_builds and faforge.pipwheel disagree: a bug to report",
        )
    return {
        "glue": wheel_json(glue),
        "kernel": wheel_json(kernel_wheel, was),
        "raw_wheel": raws[0].name,
        "kernel_package": {"path": str(kernel), "filename": kernel.name, "from": kernel_from},
        "torch": torch_version,
        "python": str(where.cross.python if where.cross else python),
        "cuda_home": str(cuda_home),
        "steps_s": {k: round(v, 1) for k, v in steps.items()},
    }
