"""`faforge verify`'s gates of a wheel (the pip world): the gates of the conda packages, on PyPI's torch and real pip.

A wheel says what it is in its file name and METADATA (faforge.pipwheel.facts); its project is its kind:
  * flash-attn, the glue (2.8.3.post2+torch2.14.cu130.abi1, one CPython tag): its pip cell is the matrix's
    pypi/linux-64/py311/torch2.14/cu130/abi1, which names the exact torch release (2.14.1) and its wheel file;
    its kernel wheel is the exact libflash-attn-kernels== of its Requires-Dist, among the arguments or beside it.
    - abi: faforge.abi.check_path on the wheel against that torch (the cached base venv of PyPI's torch==2.14.1,
      faforge.release.clean_env; or --against), the kernel wheel's libflash_attn_kernels/ as a library folder,
      its manylinux tag's glibc as the floor;
    - import: a hardlink copy of that base venv, where real pip installs the glue and its kernel wheel from a
      loopback staging index of just these wheels (faforge.release.pip_env), the cell's torch index (PyPI) as
      the extra index and torch==2.14.1 pinned, so pip must keep the torch it finds; pip replacing torch is a
      failure. Then `python -I -c "import torch; import flash_attn; import flash_attn_2_cuda"`;
    - gpu: faforge.gpu.run_suite in such a venv (exit 0 passed, 1 failed, 3 skipped: no GPU here).
  * libflash-attn-kernels, the kernel wheel (+cu130.sm80.90.100.120ptx.philox64.h<hash>):
    - abi: the torch-free check (faforge.kernels.torchfree) of libflash_attn_kernels/libflash_attn_kernels.so.1,
      with the arch list its label names and the machine of its platform tag;
    - import: real pip installs it (--no-deps --no-index) into a hardlink copy of the cached venv holding only
      PyPI's CUDA runtime of its CUDA, and a clean process dlopen()s it with nothing preloaded and no
      LD_LIBRARY_PATH: its RUNPATH ($ORIGIN/../nvidia/cu13/lib) must find libcudart, its C interface resolve;
    - gpu: its code runs only through a glue wheel of the same call that pins it (that run serves both).
  * flash-attn-3 (abi3, +cu130.sm90a, Requires-Dist torch>=2.9): the torch range it serves is that of its
    indexes: the torch minors of the pip cells of its platform and CUDA that its torch requirement admits.
    - abi: the stable-ABI check over that range (faforge.release.verify_stable.stable_abi_check): --against
      must hold its oldest and newest minor, else `skipped` naming them, as for the conda FA3;
    - import: as the glue's, beside PyPI's torch of the range's newest minor (flash-attn-3==V, torch==X);
    - gpu: the FA3 suite in such a venv.
  * a linux-aarch64 wheel on an x86_64 machine: abi natively against --against (the aarch64 torch) with the
    emulator's sysroot, as verify_foreign does for conda; import: this machine's real pip installs our wheels
    from the loopback index for the wheel's platform (--platform TAG --target DIR --only-binary=:all:
    --no-deps), then the target's Python imports them under qemu with the --against torch behind them; gpu
    skipped (a GPU runner of that machine runs it). A kernel wheel's import there: pip --platform --target of it
    beside the CUDA runtime of the --against torch's site (its nvidia/ folder), dlopen() under qemu, nothing preloaded.
A fact a wheel lacks (no label, no pip cell) makes the gates that need it `skipped` with the reason, never passed.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from faforge.abi.check import PLATFORM_MACHINES, check_path
from faforge.abi.elf_file import ElfError
from faforge.emulator import Emulator, is_foreign
from faforge.errors import FaforgeError
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.kernels.cachekey import archs_of_tag
from faforge.kernels.torchfree import KERNEL_LIBRARY_EXPORTS, check_torch_free
from faforge.matrix import load_matrix
from faforge.matrix.cells import PipCell
from faforge.matrix.kernels import KERNEL_BUILD
from faforge.pipwheel.facts import WheelFacts, read_wheel, requirement
from faforge.pipwheel.layout import KERNEL_DIR
from faforge.pipwheel.manylinux import linux_platform
from faforge.pipwheel.members import check_members
from faforge.release.clean_env import MACHINE_SUBDIRS, TorchVenv, Unavailable, pypi_torch_venv
from faforge.release.package import cuda_of_tag
from faforge.release.pip_env import (
    PipRun,
    loopback_index,
    pip_install,
    pip_install_file,
    pip_target,
    site_packages,
    unpacked_wheels,
    venv_copy,
)
from faforge.release.verify import (
    DLOPEN,
    FAFORGE_SOURCE,
    Check,
    gpu_through,
    judge_abi,
    judge_torch_free,
    kernel_cuda_runtime,
    output_tail,
    run_isolated,
    suite_check,
    torch_gates,
)
from faforge.release.verify_foreign import (
    EMULATED_TIMEOUT_S,
    NOTHING_NAMED,
    Emulation,
    emulator_for,
    import_from,
    target_python,
)
from faforge.release.verify_stable import stable_abi_check, torch_python, torch_sites
from faforge.versions import vtuple
from faforge.wheelnames import FA3_LABEL, GLUE_LABEL

GLUE, KERNEL, FA3 = (
    canonicalize_name(n) for n in (FLASH_ATTN.package, FLASH_ATTN.kernel_package, FLASH_ATTN_3.package)
)
KINDS: dict[str, str] = {GLUE: "glue", KERNEL: "kernel", FA3: "fa3"}
# The kernel wheel's library, in its folder (faforge.pipwheel.layout).
KERNEL_MEMBER = f"{KERNEL_DIR}/{FLASH_ATTN.kernel_soname}"
CPYTHON_TAG = re.compile(r"cp3(?P<minor>[0-9]{1,2})")
# The base venv of every wheel gate: the glue's Python requirement (einops) and the GPU suite's pytest, so that the
# glue and FA3 gates of one (torch, Python) share one cached torch
# venv (clean_env names it torch-2.14.1-py3.11+einops+pytest).
BASE_EXTRAS = ("einops", "pytest")
# The torch index of a wheel whose torch no pip cell names (none today: every pip cell's torch is PyPI's).
PYPI_INDEX = "https://pypi.org/simple"
# The CPython of the venv an FA3 wheel (abi3, any CPython of its range) is imported and GPU-tested in.
FA3_PYTHON = "3.11"
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


@dataclass(frozen=True)
class WheelPackage:
    """One wheel under verification: its facts and what its name and label say of it. Carries what the
    manifest records (path, filename, sha256, cell_id), so release.manifest.record takes it as a package."""

    facts: WheelFacts
    kind: str  # glue | kernel | fa3
    subdir: str | None  # linux-64 | linux-aarch64, from its platform tag's machine
    glibc: str | None  # its manylinux tag's glibc floor
    python: str | None = None  # a glue's one CPython (3.11)
    torch_minor: str | None = None  # a glue's torch minor (2.14)
    cuda: str | None = None  # 13.0
    cxx11_abi: int | None = None  # a glue's C++ ABI
    cuda_archs: str | None = None  # a kernel or FA3 wheel's arch list, '80;90;100;120+PTX'
    cell: PipCell | None = None  # a glue's pip cell of the matrix

    @property
    def path(self) -> Path:
        return Path(self.facts.path)

    @property
    def filename(self) -> str:
        return self.facts.filename

    @property
    def sha256(self) -> str:
        return self.facts.sha256

    @property
    def cell_id(self) -> str | None:
        return self.cell.id if self.cell else None

    @property
    def requirement(self) -> str:
        """What pip is asked for: this very wheel's project and version."""
        return f"{self.facts.name}=={self.facts.version}"

    def requires(self, project: str) -> Requirement | None:
        return requirement(self.facts, project)

    @property
    def kernel_pin(self) -> str | None:
        """The exact kernel wheel version a glue wheel requires (libflash-attn-kernels==V), or None."""
        req = self.requires(KERNEL) if self.kind == "glue" else None
        exact = [s.version for s in (req.specifier if req else ()) if s.operator in ("==", "===")]
        return exact[0] if exact else None


def is_wheel_path(path: str | Path) -> bool:
    return str(path).endswith(".whl")


@lru_cache(maxsize=1)
def _pip_cells() -> tuple[PipCell, ...]:
    return tuple(load_matrix().pip_cells)


def _platform(facts: WheelFacts) -> tuple[str | None, str | None]:
    """(subdir, glibc floor) of the wheel's platform tags; (None, None) when they are not one Linux machine's."""
    found = [linux_platform(t) for t in facts.platform_tags]
    tags = [t for t in found if t is not None]
    subdirs = {MACHINE_SUBDIRS.get(t.machine) for t in tags}
    if not tags or len(tags) != len(found) or len(subdirs) != 1 or None in subdirs:
        return None, None
    floors = [t.glibc for t in tags if t.glibc]
    return subdirs.pop(), (min(floors, key=vtuple) if len(floors) == len(tags) else None)


def wheel_package(path: str | Path) -> WheelPackage:
    """The wheel at `path` (read by faforge.pipwheel.facts.read_wheel: a bad file is exit 2) and what its
    name says: a wheel of none of our projects is exit 2 too, as a file that is no conda package is."""
    facts = read_wheel(path)
    kind = KINDS.get(facts.name)
    if kind is None:
        raise FaforgeError(
            f"{path}: a {facts.name} wheel, none of the projects faforge verifies ({', '.join(sorted(KINDS))})",
            hint="pass the wheels `faforge wheel` wrote",
            input=str(path),
        )
    subdir, glibc = _platform(facts)
    base = WheelPackage(facts=facts, kind=kind, subdir=subdir, glibc=glibc)
    local = facts.local or ""
    if kind == "glue":
        label, python = (
            GLUE_LABEL.fullmatch(local),
            CPYTHON_TAG.fullmatch(facts.python_tags[0]) if len(facts.python_tags) == 1 else None,
        )
        if not (label and python):
            return base
        cell_id = f"{subdir}/py3{python['minor']}/torch{label['torch']}/cu{label['cuda']}/abi{label['abi']}"
        cell = next((c for c in _pip_cells() if c.id.split("/", 1)[1] == cell_id), None)
        return WheelPackage(
            facts=facts,
            kind=kind,
            subdir=subdir,
            glibc=glibc,
            python=f"3.{python['minor']}",
            torch_minor=label["torch"],
            cuda=cuda_of_tag(label["cuda"]),
            cxx11_abi=int(label["abi"]),
            cell=cell,
        )
    if kind == "kernel":
        build = KERNEL_BUILD.match(local.replace(".", "_") + f"_{facts.build_tag or 0}")
    else:
        build = FA3_LABEL.fullmatch(local)
    if not build:
        return base
    try:
        archs = archs_of_tag(build["archs"].replace(".", "_"))
    except ValueError:
        archs = None
    return WheelPackage(
        facts=facts, kind=kind, subdir=subdir, glibc=glibc, cuda=cuda_of_tag(build["cuda"]), cuda_archs=archs
    )


def pins(glue: WheelPackage, kernel: WheelPackage) -> bool:
    """Whether the glue wheel requires exactly this kernel wheel (version, local label included) for its machine."""
    if glue.kind != "glue" or kernel.kind != "kernel" or glue.kernel_pin is None or glue.subdir != kernel.subdir:
        return False
    try:
        return Version(glue.kernel_pin) == Version(kernel.facts.version)
    except InvalidVersion:
        return False


def find_kernel_wheel(glue: WheelPackage, given: list[WheelPackage]) -> WheelPackage | None:
    """The kernel wheel a glue wheel pins: among `given` (this call's wheels), else beside it (same folder,
    its file name's project and version). None when it pins none; FaforgeError (exit 2) when it is nowhere."""
    pin = glue.kernel_pin
    if pin is None:
        return None
    for other in given:
        if pins(glue, other):
            return other
    stem = f"{KERNEL.replace('-', '_')}-{pin}-"
    for candidate in sorted(glue.path.parent.glob("*.whl")):
        if candidate.name.startswith(stem) and candidate != glue.path:
            found = wheel_package(candidate)
            if pins(glue, found):
                return found
    raise FaforgeError(
        f"{glue.filename}: needs its kernel wheel {KERNEL}=={pin} ({glue.subdir}), neither among the wheels given "
        "nor beside it",
        input=str(glue.path),
        hint=f"pass it too: faforge verify {glue.path} DIR/{stem}*.whl (the kernel wheel `faforge wheel kernel` wrote, "
        f"its kernel job's artifact); no such file is in {glue.path.parent}",
    )


# ---------------------------------------------------------------------------------------------- dispatch


def wheel_gates(
    wheel: WheelPackage,
    gates: tuple[str, ...],
    against: list[Path] | None,
    *,
    kernel: WheelPackage | None = None,
    users: tuple[WheelPackage, ...] = (),
    emulation: Emulation = NOTHING_NAMED,
    announce: Callable[[str], None] = lambda message: None,
) -> list[Check]:
    """Run `gates` on one wheel (see the module's docstring). `kernel`: the kernel wheel a glue wheel pins
    (find_kernel_wheel); `users`: for a kernel wheel, the glue wheels of the call that pin it."""
    if wheel.kind == "kernel":
        return [kernel_gate(gate, wheel, users, announce, against=against or [], emulation=emulation) for gate in gates]
    machine = PLATFORM_MACHINES.get(wheel.subdir or "")
    if machine is None:
        return [
            Check(
                g,
                "skipped",
                f"{wheel.filename}: its platform tags {'.'.join(wheel.facts.platform_tags)} name no one Linux machine "
                f"({', '.join(PLATFORM_MACHINES)}), so no torch can be matched",
            )
            for g in gates
        ]
    if is_foreign(machine):
        return foreign_gates(wheel, machine, gates, against, kernel, emulation)
    if wheel.kind == "fa3":
        return fa3_gates(wheel, gates, against or [], announce)
    return glue_gates(wheel, gates, against, kernel, announce)


# ---------------------------------------------------------------------------------------------- glue


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


def glue_gates(
    wheel: WheelPackage,
    gates: tuple[str, ...],
    against: list[Path] | None,
    kernel: WheelPackage | None,
    announce: Callable[[str], None],
) -> list[Check]:
    def cell_torch() -> TorchVenv:
        if MACHINE_SUBDIRS.get(platform.machine()) != wheel.subdir:
            raise Unavailable(f"a {wheel.subdir} wheel cannot be installed on this {platform.machine()} machine")
        return cell_venv(wheel, announce)

    others = (kernel,) if kernel else ()
    return torch_gates(
        gates,
        against,
        cell_torch,
        abi=lambda libraries: wheel_abi_gate(wheel, libraries, kernel),
        imports=lambda venv: pip_import_gate(wheel, others, venv, FLASH_ATTN.imports),
        gpu=lambda venv: pip_gpu_gate(wheel, others, venv),
    )


def wheel_abi_gate(
    wheel: WheelPackage, against: list[Path], kernel: WheelPackage | None, system_dirs: Sequence[Path] = ()
) -> Check:
    """check_path on the wheel; the kernel library from the kernel
    wheel's folder. An ElfError is the wheel's own content: failed."""
    with unpacked_wheels(*((kernel.facts,) if kernel else ())) as kernel_site:
        try:
            verdict = check_path(
                wheel.path,
                against,
                glibc=wheel.glibc,
                platform=wheel.subdir,
                library_dirs=[*([kernel_site / KERNEL_DIR] if kernel else []), *system_dirs],
            )
        except ElfError as exc:
            return Check("abi", "failed", exc.message)
    floor = f", glibc {wheel.glibc} ({wheel.facts.platform_tags[0]})" if wheel.glibc else ""
    return judge_abi(
        verdict,
        wheel.cxx11_abi,
        kernel=f"{kernel.filename}'s {KERNEL_DIR}/" if kernel else None,
        beside=(f", with {FLASH_ATTN.kernel_soname} from {kernel.filename}" if kernel else "") + floor,
    )


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
    PyPI's simple index) as the extra index, as a user's install line names it."""
    torch = venv.torch.split("+")[0]
    cell = wheel.cell or next((c for c in reversed(fa3_range(wheel)) if c.torch == torch), None)
    return _PipEnv((wheel, *others), venv, [wheel.requirement, f"torch=={torch}"], cell.index if cell else PYPI_INDEX)


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
def pip_gpu_gate(wheel: WheelPackage, others: tuple[WheelPackage, ...], venv: TorchVenv) -> Check:
    """The GPU suite (faforge.gpu.run_suite) in a clean venv where
    pip installed the wheel: exit 0 passed, 1 failed, 3 skipped."""
    family = ["--family", FLASH_ATTN_3.package] if wheel.kind == "fa3" else []
    with _pip_env(wheel, others, venv) as env:
        if env.problem:
            return Check("gpu", "skipped", f"not run: {env.problem}")
        result = subprocess.run(
            [str(env.python), "-m", "faforge.gpu.run_suite", *family, "--json"],
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(FAFORGE_SOURCE)),
            cwd=env.python.parents[1],
        )
    return suite_check(result)


# ---------------------------------------------------------------------------------------------- kernel


def kernel_library(wheel: WheelPackage, folder: Path) -> Path | None:
    """The kernel wheel's library, extracted into `folder`; None when the wheel holds none."""
    with zipfile.ZipFile(wheel.path) as archive:
        check_members(archive, str(wheel.path))
        if KERNEL_MEMBER not in archive.namelist():
            return None
        return Path(archive.extract(KERNEL_MEMBER, folder))


def kernel_gate(
    gate: str,
    wheel: WheelPackage,
    users: tuple[WheelPackage, ...],
    announce: Callable[[str], None],
    *,
    against: Sequence[Path] = (),
    emulation: Emulation = NOTHING_NAMED,
) -> Check:
    if gate == "abi":
        return kernel_abi_gate(wheel)
    if gate == "import":
        machine = PLATFORM_MACHINES.get(wheel.subdir or "")
        return (
            emulated_kernel_import(wheel, machine, against, emulation)
            if is_foreign(machine)
            else kernel_import_gate(wheel, announce)
        )

    def user_torch(user: WheelPackage) -> TorchVenv:
        machine = PLATFORM_MACHINES.get(user.subdir or "")
        if is_foreign(machine):
            raise Unavailable(gpu_skipped_text(user, machine))
        return cell_venv(user, announce)

    return gpu_through(
        users,
        user_torch,
        lambda user, venv: pip_gpu_gate(user, (wheel,), venv),
        what=f"{FLASH_ATTN.package} wheel",
        none=f"its GPU code runs only through a {FLASH_ATTN.package} wheel that pins this one; pass one "
        "(e.g. from the same output folder) in the same verify call",
    )


def gpu_skipped_text(wheel: WheelPackage, machine: str) -> str:
    return (
        f"a {wheel.subdir} wheel's GPU suite runs natively on a GPU runner of that machine ({machine}); "
        f"this machine is {platform.machine()}"
    )


def kernel_abi_gate(wheel: WheelPackage) -> Check:
    """The torch-free check of the kernel library, with the arch list its label names and its platform's machine."""
    if wheel.cuda_archs is None:
        return Check(
            "abi",
            "skipped",
            f"{wheel.filename}: its local label names no arch list "
            "(+cu<CUDA>.sm<archs>.philox<bits>.h<hash>), so its GPU code cannot be judged",
        )
    with tempfile.TemporaryDirectory(prefix="faforge-kernel-wheel-") as tmp:
        library = kernel_library(wheel, Path(tmp))
        if library is None:
            return Check(
                "abi",
                "failed",
                f"holds no {KERNEL_MEMBER}, the library every {FLASH_ATTN.package} wheel pinning it loads",
            )
        try:
            report = check_torch_free(library, expect_archs=wheel.cuda_archs, exports=KERNEL_LIBRARY_EXPORTS)
        except ElfError as exc:
            return Check("abi", "failed", f"{KERNEL_MEMBER}: {exc.message}")
    machine = PLATFORM_MACHINES.get(wheel.subdir or "")
    if machine is None:
        platform_problems = [f"platform: its tags {'.'.join(wheel.facts.platform_tags)} name no one Linux machine"]
    elif report.machine != machine:
        platform_problems = [
            f"wrong-architecture: built for {report.machine}, but its tag {wheel.facts.platform_tags[0]} says {machine}"
        ]
    else:
        platform_problems = []
    return judge_torch_free(report, KERNEL_MEMBER, wheel.cuda_archs, platform_problems)


def kernel_import_gate(wheel: WheelPackage, announce: Callable[[str], None]) -> Check:
    """pip installs the kernel wheel beside PyPI's CUDA runtime
    alone; a clean process dlopen()s it with nothing preloaded."""
    try:
        runtime = kernel_cuda_runtime(wheel, "its local label", announce)
    except Unavailable as exc:
        return Check("import", "skipped", str(exc))
    with venv_copy(runtime.site_packages.parents[2]) as prefix:
        python = prefix / "bin" / "python"
        run = pip_install_file(python, wheel.path)
        if run.returncode != 0:
            return Check(
                "import", "failed", f"pip would not install it beside PyPI's {runtime.requirement}: {run.errors()}"
            )
        library = site_packages(prefix) / KERNEL_MEMBER
        if not library.is_file():
            return Check("import", "failed", f"pip installed it, but there is no {KERNEL_MEMBER} in site-packages")
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
        result = subprocess.run(
            [str(python), "-I", "-c", DLOPEN + REPORT_LOADED, str(library)],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        elsewhere = loaded_from_elsewhere(result.stdout, prefix, ("libcudart.so",))
    if result.returncode != 0:
        return Check(
            "import",
            "failed",
            f"dlopen of {KERNEL_MEMBER} (pip-installed beside PyPI's {runtime.requirement}, nothing "
            f"preloaded) failed: {output_tail(result)}",
        )
    if elsewhere:
        return Check(
            "import",
            "failed",
            f"dlopen of {KERNEL_MEMBER} loaded {'; '.join(elsewhere)}, not PyPI's {runtime.requirement} beside "
            "it: its RUNPATH does not reach pip's nvidia/*/lib (a machine without that library cannot load it)",
        )
    return Check(
        "import",
        "passed",
        f"pip installed it (--no-deps) beside PyPI's {runtime.requirement}; dlopen of {KERNEL_MEMBER} in a "
        "clean process, nothing preloaded: its RUNPATH finds libcudart in the venv, its C interface resolves",
    )


def emulated_kernel_import(wheel: WheelPackage, machine: str, against: Sequence[Path], emulation: Emulation) -> Check:
    """The kernel wheel of another machine: this machine's pip installs it for its platform into a folder from the
    loopback index, beside the CUDA runtime of an --against torch's site-packages (its nvidia/ folder, where pip puts
    PyPI's runtime wheel), and the target's Python dlopen()s it under qemu with nothing preloaded and no
    LD_LIBRARY_PATH: its RUNPATH ($ORIGIN/../nvidia/cu13/lib) must find libcudart, its C interface resolve."""
    emulator, why_not = emulator_for(machine, emulation)
    if emulator is None:
        return Check("import", "skipped", f"not run: {why_not}")
    python = target_python(machine, emulation)
    if python is None:
        return Check(
            "import",
            "skipped",
            f"not run: no {machine} Python to dlopen it with; name one with --target-python or "
            "$FAFORGE_TARGET_PYTHON (a plain prefix's bin/python, or a conda linux-aarch64 prefix's)",
        )
    sites = [site for site in torch_sites(against) if (site / "nvidia").is_dir()]
    if not sites:
        return Check(
            "import",
            "skipped",
            f"no {machine} CUDA runtime to load it beside: pass --against the site-packages of a "
            f"{machine} torch of CUDA {wheel.cuda} (its nvidia/ folder holds PyPI's runtime wheel)",
        )
    site = sites[-1]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    with tempfile.TemporaryDirectory(prefix="faforge-target-") as tmp, loopback_index(KERNEL, [wheel.facts]) as url:
        target = Path(tmp) / "site-packages"
        run = pip_target(
            target,
            [wheel.requirement],
            index_url=url,
            platforms=list(wheel.facts.platform_tags),
            python=torch_python(site) or FA3_PYTHON,
            abi=None,
        )
        if run.returncode != 0:
            return Check(
                "import",
                "failed",
                f"pip could not install {wheel.requirement} for {wheel.facts.platform_tags[0]} from the "
                f"loopback index: {run.errors()}",
            )
        library = target / KERNEL_MEMBER
        if not library.is_file():
            return Check("import", "failed", f"pip installed it, but there is no {KERNEL_MEMBER} in the target folder")
        (target / "nvidia").symlink_to(
            site / "nvidia", target_is_directory=True
        )  # pip's layout: the runtime wheel beside it
        started = time.monotonic()
        try:
            result = subprocess.run(
                [*emulator.command(python), "-I", "-c", DLOPEN, str(library)],
                capture_output=True,
                text=True,
                timeout=EMULATED_TIMEOUT_S,
                env=env,
                cwd=tmp,
            )
        except subprocess.TimeoutExpired:
            return Check(
                "import",
                "failed",
                f"the dlopen under {Path(emulator.qemu).name} did not finish in {EMULATED_TIMEOUT_S} s",
            )
    how = (
        f"pip --platform {wheel.facts.platform_tags[0]} --target from the "
        f"loopback index {url}, beside the CUDA runtime of {site}/nvidia; "
        f"emulated: {Path(emulator.qemu).name} -L {emulator.sysroot} {python}, {time.monotonic() - started:.0f} s"
    )
    if result.returncode != 0:
        return Check(
            "import",
            "failed",
            f"dlopen of {KERNEL_MEMBER} with nothing preloaded failed ({how}): {output_tail(result)}",
        )
    return Check(
        "import",
        "passed",
        f"dlopen of {KERNEL_MEMBER} on {machine}, nothing preloaded: its RUNPATH finds libcudart beside it, "
        f"its C interface resolves ({how})",
    )


# ---------------------------------------------------------------------------------------------- flash-attn-3


def fa3_range(wheel: WheelPackage) -> list[PipCell]:
    """The newest pip cell of each torch minor the FA3 wheel's indexes serve (its platform and CUDA, a torch its
    Requires-Dist admits), oldest minor first; empty when it has no CUDA label or no index takes it."""
    torch = wheel.requires("torch")
    newest: dict[str, PipCell] = {}
    for cell in _pip_cells():
        if cell.platform != wheel.subdir or cell.cuda != wheel.cuda:
            continue
        try:
            admitted = torch is None or torch.specifier.contains(Version(cell.torch_minor), prereleases=True)
        except (InvalidVersion, InvalidSpecifier):
            admitted = False
        if admitted and (cell.torch_minor not in newest or vtuple(cell.torch) > vtuple(newest[cell.torch_minor].torch)):
            newest[cell.torch_minor] = cell
    return [newest[m] for m in sorted(newest, key=vtuple)]


def _fa3_unserved(wheel: WheelPackage) -> str:
    if wheel.cuda is None:
        return (
            f"{wheel.filename}: its local label {wheel.facts.local!r} names no "
            "CUDA (+cu130.sm80.90a), so no index and no torch range takes it"
        )
    return (
        f"{wheel.filename}: no pip cell of {wheel.subdir} with CUDA {wheel.cuda} has a torch its requirement "
        f"{wheel.requires('torch') or 'torch'} admits, so no index serves it and its torch range is empty"
    )


def _fa3_abi(wheel: WheelPackage, cells: list[PipCell], against: list[Path]) -> Check:
    """The stable-ABI gate of an FA3 wheel over the torch minors of `cells` (fa3_range's: of its platform and CUDA)."""
    if not cells or wheel.subdir is None or wheel.cuda is None:
        return Check("abi", "skipped", _fa3_unserved(wheel))
    return stable_abi_check(
        wheel.path, subdir=wheel.subdir, cuda=wheel.cuda, served=tuple(c.torch_minor for c in cells), against=against
    )


def fa3_gates(
    wheel: WheelPackage, gates: tuple[str, ...], against: list[Path], announce: Callable[[str], None]
) -> list[Check]:
    cells = fa3_range(wheel)
    venv, reason = None, _fa3_unserved(wheel) if not cells else ""  # reason: why a gate that needs a torch has none
    if cells and set(gates) & {"import", "gpu"}:
        newest = cells[-1]
        try:
            venv = pypi_torch_venv(f"=={newest.torch}", FA3_PYTHON, BASE_EXTRAS, announce)
            if venv.cuda != wheel.cuda:
                raise Unavailable(
                    f"PyPI's torch {venv.torch} is built for CUDA {venv.cuda}, the wheel for CUDA {wheel.cuda}"
                )
        except Unavailable as exc:
            venv, reason = None, f"no torch {newest.torch} (the newest its indexes serve) here: {exc}"
    checks = []
    for gate in gates:
        if gate == "abi":
            checks.append(_fa3_abi(wheel, cells, against))
        elif venv is None:
            checks.append(Check(gate, "skipped", reason))
        elif gate == "import":
            checks.append(pip_import_gate(wheel, (), venv, FLASH_ATTN_3.imports))
        elif gate == "gpu":
            checks.append(pip_gpu_gate(wheel, (), venv))
    return checks


# ---------------------------------------------------------------------------------------------- another machine


def foreign_gates(
    wheel: WheelPackage,
    machine: str,
    gates: tuple[str, ...],
    against: list[Path] | None,
    kernel: WheelPackage | None,
    emulation: Emulation,
) -> list[Check]:
    emulator, why_not = emulator_for(machine, emulation)
    python = target_python(machine, emulation) if "import" in gates else None
    checks = []
    for gate in gates:
        if gate == "abi":
            if not against:
                checks.append(
                    Check(
                        "abi",
                        "skipped",
                        f"no {machine} torch to check against here; pass --against its torch/lib, "
                        "site-packages or prefix (the abi gate itself runs on any machine)",
                    )
                )
            elif wheel.kind == "fa3":
                checks.append(_fa3_abi(wheel, fa3_range(wheel), against))
            else:
                checks.append(wheel_abi_gate(wheel, against, kernel, emulator.library_dirs() if emulator else []))
        elif gate == "import":
            checks.append(emulated_wheel_import(wheel, kernel, against or [], emulator, why_not, python))
        elif gate == "gpu":
            checks.append(Check("gpu", "skipped", gpu_skipped_text(wheel, machine)))
    return checks


def emulated_wheel_import(
    wheel: WheelPackage,
    kernel: WheelPackage | None,
    against: list[Path],
    emulator: Emulator | None,
    why_not: str | None,
    python: Path | None,
) -> Check:
    """pip installs our wheels for the wheel's platform into a folder from the loopback index; the target's
    Python imports them under qemu with the newest --against torch behind them."""
    machine = emulator.machine if emulator else PLATFORM_MACHINES.get(wheel.subdir or "", "?")
    if emulator is None:
        return Check("import", "skipped", f"not run: {why_not}")
    if python is None:
        return Check(
            "import",
            "skipped",
            f"not run: no {machine} Python to import with; name one with --target-python or "
            "$FAFORGE_TARGET_PYTHON (a plain prefix's bin/python, or a conda linux-aarch64 prefix's)",
        )
    sites = torch_sites(against)
    if not sites:
        return Check(
            "import",
            "skipped",
            f"no {machine} torch to import beside: pass --against the site-packages of one (pip install "
            "--target DIR --platform manylinux_2_28_aarch64 --only-binary=:all: torch==VERSION)",
        )
    site = sites[-1]
    version = wheel.python or torch_python(site) or FA3_PYTHON
    ours = (wheel, *((kernel,) if kernel else ()))
    imports = FLASH_ATTN_3.imports if wheel.kind == "fa3" else FLASH_ATTN.imports
    cuda = (wheel.cuda or "").replace(".", "")
    served = fa3_range(wheel) if wheel.kind == "fa3" else []
    # The staging index, named as ours are.
    index = f"torch{wheel.torch_minor or (served[-1].torch_minor if served else '')}-cu{cuda}"
    with (
        tempfile.TemporaryDirectory(prefix="faforge-target-") as tmp,
        loopback_index(index, [w.facts for w in ours]) as url,
    ):
        target = Path(tmp) / "site-packages"
        platforms = sorted({t for w in ours for t in w.facts.platform_tags})
        run = pip_target(
            target,
            [w.requirement for w in ours],
            index_url=url,
            platforms=platforms,
            python=version,
            abi=f"cp{version.replace('.', '')}" if wheel.kind == "glue" else None,
        )
        if run.returncode != 0:
            return Check(
                "import",
                "failed",
                f"pip could not install {', '.join(w.requirement for w in ours)} for {', '.join(platforms)} "
                f"from the loopback index: {run.errors()}",
            )

        def how(seconds: float) -> str:
            return (
                f"pip --platform {platforms[0]} --target from the loopback "
                f"index {url}; emulated: {Path(emulator.qemu).name} -L "
                f"{emulator.sysroot} {python}, {seconds:.0f} s, torch from {site}"
            )

        return import_from([str(target)], emulator.command(python), site, imports, how, machine, cwd=Path(tmp))
