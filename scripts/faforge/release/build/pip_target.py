"""Which machine builds which pip cell's glue, and the cross build's inputs, checked before any work.

A machine builds its own platform's pip cells natively, against PyPI's torch in a venv (CI's wheel job runs on a
runner of the cell's machine: variants/build-cost.yaml, wheel_runners); an x86_64 machine also cross-builds
linux-aarch64 cells, against the aarch64 torch in --torch-site (read, never imported) and the aarch64 CPython
--target-python names, as conda's cross builds are made (faforge.release.build.pip runs the build).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

from faforge import paths
from faforge.abi.elf import ElfError, read_info
from faforge.costmodel.runners import KERNELS_PART
from faforge.errors import FaforgeError
from faforge.matrix.pip_builds import PipBuild
from faforge.release import clean_env

# A machine builds its own platform's pip glue natively (clean_env.MACHINE_SUBDIRS: CI's wheel job runs on a runner of
# the cell's machine); an x86_64 one also cross-builds linux-aarch64 cells, as conda's cross builds do.
CROSS_MACHINE, CROSS_PLATFORM = "x86_64", "linux-aarch64"
CROSS_INPUTS_HINT = (
    "pass --torch-site DIR (the cell's aarch64 torch from PyPI, pip install --target) and --target-python PATH "
    "(an aarch64 CPython of the cell's Python, unpacked), as docs/maintaining/pip-cells.md shows; "
    "or build its kernel package alone (--part kernels)"
)


@dataclass(frozen=True)
class CrossTarget:
    """What a linux-aarch64 pip cell's glue is cross-built against: the aarch64 torch's site-packages (read, never
    imported) and the aarch64 CPython whose headers and libpython the glue compiles and links with."""

    torch_site: Path
    torch: str  # its torch/version.py's __version__, 2.11.0+cu130
    python: Path  # the target CPython's executable; its prefix is python.parents[1]
    python_includes: tuple[str, ...]


def cross_target(
    builds: list[PipBuild],
    torch_site: Path | None,
    target_python: Path | None,
    cuda_home: Path,
    machine: str | None = None,
) -> CrossTarget | None:
    """The cross build's target for the linux-aarch64 cells among `builds` on an x86_64 `machine` (default: this one),
    each input checked against each cell; None when every cell is of the machine's own platform (a native build).
    FaforgeError naming the option or cell, what is wrong and what to pass."""
    from faforge.abi.check import torch_facts  # noqa: PLC0415 (cross builds only)
    from faforge.backend.foreign import prefix_python_includes  # noqa: PLC0415 (cross builds only)

    machine = machine or platform.machine()
    native_platform = clean_env.MACHINE_SUBDIRS.get(machine)
    if native_platform is None and builds:
        raise FaforgeError(
            f"{builds[0].cell.id}: pip glue builds run on an x86_64 or aarch64 machine (this is {machine})",
            input=builds[0].cell.id,
            hint=f"build its kernel package alone (--part {KERNELS_PART}), or run on such a machine",
        )
    cross = [b for b in builds if b.cell.platform != native_platform]
    native = [b for b in builds if b.cell.platform == native_platform]
    if cross and (machine, cross[0].cell.platform) != (CROSS_MACHINE, CROSS_PLATFORM):
        home = next(m for m, p in clean_env.MACHINE_SUBDIRS.items() if p == cross[0].cell.platform)
        raise FaforgeError(
            f"{cross[0].cell.id}: a {cross[0].cell.platform} pip cell's glue is built on an {home} machine (this is "
            f"{machine})",
            input=cross[0].cell.id,
            hint=f"build it on an {home} machine (CI's wheel job runs there), "
            f"or only its kernel package here (--part {KERNELS_PART})",
        )
    if not cross:
        for option, value in (("--torch-site", torch_site), ("--target-python", target_python)):
            if value:
                raise FaforgeError(
                    f"{option} is for cross-building {CROSS_PLATFORM} pip cells on {CROSS_MACHINE}, and none is asked "
                    "for",
                    input=option,
                    hint=f"drop {option}; a pip cell of this machine's platform ({native_platform}) "
                    "is built against PyPI's torch in a venv of its own",
                )
        return None
    if native:
        raise FaforgeError(
            f"{cross[0].cell.id} and {native[0].cell.id}: a linux-aarch64 and a linux-64 pip cell in one call; the "
            "aarch64 one is cross-built against --torch-site",
            hint="build each platform's pip cells in a call of its own",
        )
    first = cross[0].cell
    if torch_site is None or target_python is None:
        option = "--torch-site" if torch_site is None else "--target-python"
        raise FaforgeError(
            f"{first.id}: a linux-aarch64 pip cell's glue is cross-built, and {option} is not given",
            input=first.id,
            hint=CROSS_INPUTS_HINT,
        )
    pythons = sorted({b.cell.python for b in cross})
    if len(pythons) != 1:
        raise FaforgeError(
            f"these linux-aarch64 pip cells are for CPython {' and '.join(pythons)}; one --target-python serves one",
            hint="build each Python's cells in a call of its own",
        )
    python, site = Path(target_python).absolute(), Path(torch_site).absolute()
    with paths.user_path("--target-python", target_python):
        prefix = python.parents[1] if len(python.parents) > 1 else python
        includes = prefix_python_includes(prefix, pythons[0])
        if not python.is_file() or not (Path(includes[0]) / "Python.h").is_file():
            raise FaforgeError(
                f"--target-python {target_python}: not a CPython {pythons[0]} executable with include/python"
                f"{pythons[0]}/Python.h in its prefix ({prefix})",
                input=str(target_python),
                hint=CROSS_INPUTS_HINT,
            )
        try:
            machine = read_info(python).machine
        except ElfError as exc:
            raise FaforgeError(
                f"--target-python {target_python}: not an ELF executable ({exc})",
                input=str(target_python),
                hint=CROSS_INPUTS_HINT,
            ) from None
        if machine != "aarch64":
            raise FaforgeError(
                f"--target-python {target_python}: an {machine} executable; the cell's glue is for aarch64",
                input=str(target_python),
                hint=CROSS_INPUTS_HINT,
            )
    with paths.user_path("--torch-site", torch_site):
        if not (site / "torch" / "version.py").is_file() or not (site / "torch" / "lib").is_dir():
            raise FaforgeError(
                f"--torch-site {torch_site}: no torch/version.py and "
                "torch/lib there, so not a site-packages holding torch",
                input=str(torch_site),
                hint=CROSS_INPUTS_HINT,
            )
        site = site.resolve()
        facts = torch_facts([site / "torch" / "lib"])
        for build in cross:
            cell = build.cell
            found = ((facts.version or "?").split("+")[0], facts.cuda, facts.cxx11_abi, facts.machine)
            if found != (cell.torch, cell.cuda, cell.cxx11_abi, "aarch64"):
                raise FaforgeError(
                    f"--torch-site {torch_site}: torch {facts.version} (CUDA {facts.cuda}, C++ ABI {facts.cxx11_abi}, "
                    f"{facts.machine}); {cell.id} needs PyPI's torch {cell.torch} for CUDA {cell.cuda}, ABI "
                    f"{cell.cxx11_abi}, aarch64",
                    input=str(torch_site),
                    hint=CROSS_INPUTS_HINT,
                )
            tag = cell.python.replace(".", "")
            if not list((site / "torch").glob(f"_C.cpython-{tag}-aarch64-linux-gnu.so")):
                raise FaforgeError(
                    f"--torch-site {torch_site}: its torch is not for CPython {cell.python} (no torch/_C.cpython-{tag}-"
                    f"aarch64-linux-gnu.so); {cell.id} is",
                    input=str(torch_site),
                    hint=CROSS_INPUTS_HINT,
                )
    if not (cuda_home / "targets" / "sbsa-linux" / "include" / "cuda_runtime.h").is_file():
        raise FaforgeError(
            f"the CUDA toolkit {cuda_home} has no targets/sbsa-linux/include/cuda_runtime.h, the aarch64 target tree "
            "the cross build compiles and links against",
            input=str(cuda_home),
            hint="install the toolkit's sbsa-linux target (conda-forge: cuda-cudart-dev_linux-aarch64), or pass a "
            "--cuda-home that has it",
        )
    assert facts.version is not None  # every cell (there is one) matched it above
    return CrossTarget(torch_site=site, torch=facts.version, python=python, python_includes=tuple(includes))
