"""The venv a wheel's import and gpu gates run in, and those two gates: our wheels installed by real pip.

The venv is a hardlink copy of the cached base venv of PyPI's torch (faforge.release.clean_env): the torch
release of a glue's pip cell, or the newest torch of a stable-ABI wheel's range. Real pip installs our wheels into it
from a loopback staging index of just these wheels (faforge.release.pip_env), with the index that serves that
torch (PyPI) as the extra index and the torch pinned, so pip must keep the torch it finds; pip replacing torch
is a failure. The import gate then runs `python -I -c "import torch; import flash_attn; import
flash_attn_2_cuda"` and checks that torch's, the kernel wheel's and the CUDA runtime's libraries were all mapped
from the venv; the gpu gate runs faforge.gpu.run_suite there (exit 0 passed, 1 failed, 3 skipped: no GPU here).
One home, so every family's wheels are installed and judged alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

from faforge.family import FLASH_ATTN
from faforge.release.clean_env import BASE_EXTRAS, TorchVenv, pypi_torch_venv
from faforge.release.pip_env import PipRun, loopback_index, pip_install, venv_copy
from faforge.release.venv_cache import Unavailable
from faforge.release.verify.gates import FAFORGE_SOURCE, Check, output_tail, run_isolated, suite_check
from faforge.release.verify.wheel_identity import WheelPackage
from faforge.release.verify.wheel_pairs import torch_range
from faforge.wheelfetch import PYPI_SIMPLE_INDEX

# Appended to an import or dlopen run: the files the process has mapped (/proc/self/maps), one JSON line after the mark.
# A library the system also has (a CUDA toolkit's libcudart in ld.so.cache) loads whatever the RUNPATH says; where
# it came from tells whether pip's layout served it.
LOADED_MARK = "@@faforge-loaded@@"
REPORT_LOADED = (
    f"\nimport json as _json\nprint({LOADED_MARK!r}, _json.dumps(sorted({{_l.split(None, 5)[5].strip() "
    "for _l in open('/proc/self/maps') if len(_l.split(None, 5)) == 6 and _l.split(None, 5)[5].startswith('/')})))"
)
# The libraries that must come from the venv pip made: torch's, the kernel wheel's, NVIDIA's CUDA runtime.
OWN_LIBRARIES = ("libc10.so", "libtorch", FLASH_ATTN.kernel_library, "libcudart.so")


def cell_venv(wheel: WheelPackage, announce: Callable[[str], None]) -> TorchVenv:
    """The cached base venv of the glue wheel's cell: PyPI's
    torch==<the cell's release>, confirmed from the installed torch."""
    if wheel.cell is None:
        what = (
            f"pip cell {wheel.subdir}/py{(wheel.python or '').replace('.', '')}/torch{wheel.torch_minor}/cu"
            f"{(wheel.cuda or '').replace('.', '')}/abi{wheel.cxx11_abi}"
            if wheel.torch_minor
            else "label"
        )
        raise Unavailable(
            f"{wheel.filename}: no {what} in the matrix (faforge "
            "matrix --world pypi), so the torch release it installs "
            "beside is unknown"
            if wheel.torch_minor
            else f"{wheel.filename}: its version's local label {wheel.facts.local!r} "
            "and tags name no torch minor, CUDA, C++ ABI and "
            "one CPython (+torch2.11.cu130.abi1, cp312), so no torch can be matched"
        )
    cell = wheel.cell
    venv = pypi_torch_venv(f"=={cell.torch}", cell.python, BASE_EXTRAS, announce)
    if venv.torch.split("+")[0] != cell.torch or venv.cuda != cell.cuda or venv.cxx11_abi != cell.cxx11_abi:
        raise Unavailable(
            f"PyPI's torch=={cell.torch} installed torch {venv.torch} (CUDA {venv.cuda}, C++ ABI {venv.cxx11_abi}), "
            f"but the cell {cell.id} is CUDA {cell.cuda}, C++ ABI {cell.cxx11_abi} ({cell.wheel})"
        )
    return venv


def index_of(wheel: WheelPackage, venv: TorchVenv) -> str:
    """The staging index's name, as our published index names it: torch<minor>-cu<NNN> of the torch beside it."""
    minor = ".".join(venv.torch.split("+")[0].split(".")[:2])
    return f"torch{minor}-cu{(wheel.cuda or venv.cuda or '').replace('.', '')}"


def loaded_from_elsewhere(stdout: str, prefix: Path, names: tuple[str, ...] = OWN_LIBRARIES) -> list[str]:
    """'NAME from PATH' for each library of `names` the run mapped from outside `prefix` (the venv pip made)."""
    line = next((line for line in stdout.splitlines() if line.startswith(LOADED_MARK)), None)
    mapped = json.loads(line.removeprefix(LOADED_MARK)) if line else []
    inside = str(prefix.resolve()) + os.sep
    return [f"{Path(p).name} from {p}" for p in mapped if Path(p).name.startswith(names) and not p.startswith(inside)]


def install_problem(run: PipRun, ours: tuple[WheelPackage, ...], venv: TorchVenv) -> str | None:
    """Why a pip install into the copy of `venv` did not give exactly our wheels beside its torch, or None."""
    if run.returncode != 0:
        return f"pip could not install {', '.join(w.requirement for w in ours)} from the loopback index: {run.errors()}"
    installed = run.installed
    if "torch" in installed:
        return (
            f"pip replaced torch {venv.torch} with torch {installed['torch']} "
            "(the wheel's Requires-Dist does not admit the "
            "torch of its cell); it must keep the torch it finds"
        )
    missing = [w.requirement for w in ours if installed.get(w.facts.name) != w.facts.version]
    if missing:
        return (
            f"pip did not install {', '.join(missing)} (it installed: "
            f"{', '.join(f'{k}=={v}' for k, v in installed.items()) or 'nothing'})"
        )
    return None


class _PipEnv:
    """A hardlink copy of `venv` with `ours` installed by real pip from a loopback index (a context manager)."""

    def __init__(
        self, ours: tuple[WheelPackage, ...], venv: TorchVenv, requirements: list[str], extra_index: str | None
    ):
        self.ours, self.venv, self.requirements, self.extra_index = ours, venv, requirements, extra_index

    def __enter__(self):
        self._stack = contextlib.ExitStack()
        prefix = self._stack.enter_context(venv_copy(self.venv.prefix))
        self.url = self._stack.enter_context(
            loopback_index(index_of(self.ours[0], self.venv), [w.facts for w in self.ours])
        )
        self.prefix, self.python = prefix, prefix / "bin" / "python"
        self.run = pip_install(self.python, self.requirements, index_url=self.url, extra_index_url=self.extra_index)
        self.problem = install_problem(self.run, self.ours, self.venv)
        return self

    def __exit__(self, *exc):
        return self._stack.__exit__(*exc)

    @property
    def how(self) -> str:
        return (
            f"pip installed {', '.join(w.requirement for w in self.ours)} from the loopback index {self.url} "
            f"({self.run.seconds:.0f} s) into a clean venv with PyPI "
            f"torch {self.venv.torch} (CUDA {self.venv.cuda}), torch kept"
        )


def _pip_env(wheel: WheelPackage, others: tuple[WheelPackage, ...], venv: TorchVenv) -> _PipEnv:
    """The venv copy of `venv` with the wheel and `others` from the loopback index,
    the torch of the venv pinned, and the index that serves that torch (the cell's:
    PyPI's simple index; PyPI's for a torch no pip cell names, none today) as the extra index, as a user's
    install line names it."""
    torch = venv.torch.split("+")[0]
    cell = wheel.cell or next((c for c in reversed(torch_range(wheel)) if c.torch == torch), None)
    return _PipEnv(
        (wheel, *others), venv, [wheel.requirement, f"torch=={torch}"], cell.index if cell else PYPI_SIMPLE_INDEX
    )


def pip_import_gate(
    wheel: WheelPackage, others: tuple[WheelPackage, ...], venv: TorchVenv, imports: tuple[str, ...]
) -> Check:
    with _pip_env(wheel, others, venv) as env:
        if env.problem:
            return Check("import", "failed", env.problem)
        torch_only = run_isolated(env.python, "import torch")
        if torch_only.returncode != 0:
            return Check(
                "import", "skipped", f"torch {venv.torch} itself does not import here: {output_tail(torch_only)}"
            )
        result = run_isolated(env.python, "; ".join(f"import {m}" for m in imports) + REPORT_LOADED)
        elsewhere = loaded_from_elsewhere(result.stdout, env.prefix)
    if result.returncode != 0:
        return Check("import", "failed", f"`import {', '.join(imports)}` failed after {env.how}: {output_tail(result)}")
    if elsewhere:
        return Check(
            "import",
            "failed",
            f"imported {', '.join(imports[1:])}, but not from pip's layout alone: {'; '.join(elsewhere[:4])} "
            f"(outside the venv; its RUNPATH does not reach the venv's copy); {env.how}",
        )
    libraries = "torch's, the kernel wheel's and the CUDA runtime's" if others else "torch's and the CUDA runtime's"
    return Check(
        "import",
        "passed",
        f"imported {', '.join(imports[1:])}, {libraries} libraries all loaded from the venv; {env.how}",
    )


@cache  # a kernel wheel's gpu gate is its glue's run: one verify call runs it once
def pip_gpu_gate(
    wheel: WheelPackage, others: tuple[WheelPackage, ...], venv: TorchVenv, suite: tuple[str, ...] = ()
) -> Check:
    """The GPU suite (faforge.gpu.run_suite, with `suite` its family's arguments) in a clean venv where
    pip installed the wheel: exit 0 passed, 1 failed, 3 skipped."""
    with _pip_env(wheel, others, venv) as env:
        if env.problem:
            return Check("gpu", "skipped", f"not run: {env.problem}")
        result = subprocess.run(
            [str(env.python), "-m", "faforge.gpu.run_suite", *suite, "--json"],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(FAFORGE_SOURCE)),
            cwd=env.python.parents[1],
        )
    return suite_check(result)
