"""The exact fix for each diagnosis, taken from our real matrix and channel.

A fix installs the matrix cell that matches the environment's torch: its
build-string glob (py312_torch2_7_cu129_cxx11abi1_*) comes from py-rattler-build's
own render of the recipe, and its channels from the cell's torch world, so the
command is what the channel really serves. When no cell matches, the fix says
why (faforge.matrix.cells.explain_missing), names the closest cells, and gives
the command that builds flash-attn locally against the environment's own torch.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, replace

from faforge import build_script, config, paths
from faforge.doctor.diagnose import ERROR, Problem, Situation
from faforge.gpu import compat
from faforge.matrix import Matrix
from faforge.matrix.cells import Cell, explain_missing
from faforge.matrix.kernels import KERNEL_PACKAGE
from faforge.matrix.render import RenderedCell, build_string_head
from faforge.versions import minor_of, vtuple

_CONDA_CUDA = re.compile(r"cuda(?P<tag>\d+)")  # pytorch builds: cuda129_mkl_py312_h..._302, py3.12_cuda12.1_cudnn9.1.0_0
_LEGACY_CUDA = re.compile(r"_cuda(?P<version>\d+\.\d+)_")
# The pip wheel that ships libcudart.so.N, per CUDA major, as torch's own wheels require it:
# torch-2.7.1 METADATA "nvidia-cuda-runtime-cu12==12.6.77"; torch-2.14.1 METADATA
# "cuda-toolkit[cudart]==13.0.3", whose METADATA requires "nvidia-cuda-runtime==13.0.96.*".
CUDART_WHEELS = {12: "nvidia-cuda-runtime-cu12", 13: "nvidia-cuda-runtime==13.*"}
TORCH_RUN_PACKAGES = ("pytorch", "libtorch", "pytorch-cuda", "pytorch-mutex")
# Problems that installing the right flash-attn build resolves.
REPLACE_FLASH_ATTN = ("python-tag-mismatch", "wrong-architecture", "glibc-too-old", "libstdcxx-too-old",
                      "cxx11-abi-mismatch", "signature-drift", "cuda-major-mismatch", "flash-attn-missing",
                      "gpu-arch-missing", "import-failed")
CLOSEST = 3
KERNEL_LIBRARY_KINDS = ("kernel-library-missing", "kernel-library-mismatch")
# Where the fix for an externally managed Python (PEP 668) creates the venv that pip may install into.
VENV_FOR_EXTERNALLY_MANAGED = "~/venvs/flash-attn"


@dataclass(frozen=True)
class Fix:
    kind: str  # conda-install, conda-environment, pip, local-build, no-matching-cell
    title: str
    commands: tuple[str, ...] = ()
    environment_yml: str | None = None
    cell: str | None = None
    build_string: str | None = None  # the glob that selects the cell's build
    resolves: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Offer:
    """One matrix cell as a user installs it."""

    cell: Cell
    version: str  # flash-attn version
    build_string: str
    run_requirements: tuple[str, ...]

    @property
    def build_glob(self) -> str:
        return f"{build_string_head(self.build_string)}_*"

    @property
    def spec(self) -> str:
        return f"flash-attn =={self.version} {self.build_glob}"

    @property
    def torch_specs(self) -> list[str]:
        return [r for r in self.run_requirements if r.split()[0] in TORCH_RUN_PACKAGES]

    @property
    def channels(self) -> list[str]:
        return list(dict.fromkeys([config.public_channel(), *self.cell.channels]))


@dataclass(frozen=True)
class Target:
    """The cell that would fit the environment as it is."""

    platform: str | None
    python: str
    torch: str | None  # release, e.g. "2.7.1"
    cuda: str | None  # "12.9"
    cxx11_abi: int | None
    world: str | None  # conda world of the torch, None for a pip torch

    @property
    def cell_id(self) -> str | None:
        if None in (self.platform, self.torch, self.cuda, self.cxx11_abi):
            return None
        return f"{self.platform}/py{self.python.replace('.', '')}/torch{minor_of(self.torch)}/cu{self.cuda.replace('.', '')}/abi{self.cxx11_abi}"


def offers_from(rendered: list[RenderedCell]) -> list[Offer]:
    return [Offer(r.cell, str(r.recipe["package"]["version"]), r.build_string, r.run_requirements) for r in rendered]


def _release(version: str | None) -> str | None:
    match = re.match(r"\d+\.\d+(?:\.\d+)?", version or "")
    return match.group(0) if match else None


def _conda_cuda(build: str) -> str | None:
    legacy = _LEGACY_CUDA.search(build)
    if legacy:
        return legacy["version"]
    match = _CONDA_CUDA.search(build)
    return f"{match['tag'][:-1]}.{match['tag'][-1]}" if match else None


def target_of(s: Situation, *, conda_torch: bool = False) -> Target:
    """The environment's torch as a cell: the running torch, or with conda_torch its conda record
    (what remains once a pip copy over it is removed)."""
    facts = s.facts
    record = s.torch.conda_record
    if conda_torch and record is not None:
        return Target(facts.system.platform, facts.python.minor, _release(record.version), _conda_cuda(record.build),
                      0 if record.world == "pytorch" else 1, record.world)
    world = record.world if s.torch.how == "conda" and record is not None else None
    return Target(facts.system.platform, facts.python.minor, _release(s.torch_version), s.torch_cuda, s.torch_abi, world)


def matching(offers: list[Offer], target: Target) -> Offer | None:
    if target.cell_id is None:
        return None
    return next((o for o in offers if o.cell.id == target.cell_id and target.world in (None, o.cell.world)), None)


def closest(offers: list[Offer], target: Target, n: int = CLOSEST) -> list[Offer]:
    """The cells nearest to the target: same platform and python first, then world, torch minor, CUDA."""
    def distance(o: Offer) -> tuple:
        cell = o.cell
        torch_gap = abs(_minor_number(cell.torch) - _minor_number(target.torch)) if target.torch else 0
        cuda_gap = abs(_minor_number(cell.cuda) - _minor_number(target.cuda)) if target.cuda else 0
        return (cell.platform != target.platform, cell.python != target.python,
                target.world is not None and cell.world != target.world,
                target.cxx11_abi is not None and cell.cxx11_abi != target.cxx11_abi,
                torch_gap, _major_of(cell.cuda) != _major_of(target.cuda), cuda_gap,
                [-x for x in vtuple(cell.torch)], [-x for x in vtuple(cell.cuda)])
    return sorted(offers, key=distance)[:n]


def _minor_number(version: str | None) -> int:
    major, minor = (vtuple(version) + (0, 0))[:2] if version else (0, 0)
    return major * 100 + minor


def _major_of(version: str | None) -> int | None:
    return vtuple(version)[0] if version else None


# -- command text ---------------------------------------------------------------------------------


def _conda(s: Situation, offer_channels: list[str], specs: list[str], *extra: str) -> str:
    where = ["-p", s.facts.python.prefix] if s.facts.conda is not None else []
    channels = [arg for c in offer_channels for arg in ("-c", c)]
    return shlex.join(["conda", "install", *where, *extra, *channels, *specs])


def _pip(s: Situation, *args: str) -> str:
    return shlex.join([s.facts.python.executable, "-m", "pip", *args])


def _pip_install(s: Situation, *args: str) -> tuple[tuple[str, ...], str]:
    """Commands that pip-install into this environment, and the python that then has the packages.

    An externally managed Python (PEP 668: Debian's /usr/bin/python3) refuses `pip install`, so the
    commands first create a venv from it and install there."""
    if not s.facts.python.externally_managed:
        return (_pip(s, "install", *args),), s.facts.python.executable
    venv = os.path.expanduser(VENV_FOR_EXTERNALLY_MANAGED)
    python = f"{venv}/bin/python"
    return (shlex.join([s.facts.python.executable, "-m", "venv", venv]),
            shlex.join([python, "-m", "pip", "install", *args])), python


def _pip_fix(s: Situation, title: str, args: tuple[str, ...], resolves: tuple[str, ...], notes: tuple[str, ...] = ()) -> Fix:
    """A fix that pip-installs `args`, then runs doctor again on the python that has them."""
    commands, python = _pip_install(s, *args)
    if python != s.facts.python.executable:
        notes = (f"{s.facts.python.executable} is externally managed (PEP 668: pip may not install into it), "
                 f"so this creates a venv at {python.removesuffix('/bin/python')} and installs there", *notes)
    return Fix("pip", title, commands, resolves=resolves,
               notes=(*notes, f"then run `faforge doctor --python {python}` again for the build command"))


def environment_yml(offer: Offer, name: str = "flash-attn") -> str:
    lines = [f"name: {name}", "channels:", *(f"  - {c}" for c in offer.channels), "dependencies:",
             f"  - python {offer.cell.python}.*", *(f"  - {r}" for r in offer.torch_specs), f"  - {offer.spec}"]
    return "\n".join(lines) + "\n"


def _uninstall_pip_flash_attn(s: Situation) -> list[str]:
    return [_pip(s, "uninstall", "-y", "flash-attn")] if s.flash_attn.how == "pip" else []


def conda_install(s: Situation, offer: Offer, resolves: tuple[str, ...], *, with_torch: bool = False) -> Fix:
    specs = [*(offer.torch_specs if with_torch else []), offer.spec]
    return Fix("conda-install", f"install faforge's build for cell {offer.cell.id}",
               (*_uninstall_pip_flash_attn(s), _conda(s, offer.channels, specs)),
               environment_yml(offer), offer.cell.id, offer.build_glob, resolves)


def conda_environment(offer: Offer, title: str, resolves: tuple[str, ...]) -> Fix:
    return Fix("conda-environment", title, ("conda env create -f environment.yml",), environment_yml(offer),
               offer.cell.id, offer.build_glob, resolves)


def local_build(s: Situation, archs: str, resolves: tuple[str, ...], version: str) -> Fix:
    """Build flash-attn against this environment's own torch with the recipe's build script."""
    py = s.facts.python.executable
    script = paths.recipe_dir() / "build_flash_attn.py"
    work = "/tmp/flash-attn-build"
    abi = s.torch_abi if s.torch_abi is not None else 1
    commands = (
        shlex.join([py, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", f"flash-attn=={version}", "-d", work]),
        shlex.join(["tar", "-xzf", f"{work}/flash_attn-{version}.tar.gz", "-C", work]),
        shlex.join([py, str(script), "--source-dir", f"{work}/flash_attn-{version}", "--archs", archs,
                    "--cxx11-abi", str(abi), "--wheel-dir", f"{work}/dist"]),
        f"{shlex.join([py, '-m', 'pip', 'install', '--no-deps'])} {work}/dist/flash_attn-*.whl",
    )
    standard = build_script.load().cxx_standard(s.torch_version) if _release(s.torch_version) else "C++17 or C++20"
    notes = (f"needs nvcc for CUDA {s.torch_cuda or '?'}, ninja and a {standard.upper()} compiler (what the build script "
             f"uses for {s.torch_words}); one arch takes 1.5-2 h on 2 cores",)
    return Fix("local-build", f"build flash-attn {version} against this {s.torch_words} (archs {archs})", commands,
               resolves=resolves, notes=notes)


def _archs_for(s: Situation, matrix: Matrix) -> str:
    gpus = sorted({f"{g.capability[0]}{g.capability[1]}" for g in (*s.facts.gpus, *s.facts.torch.devices) if g.capability})
    if gpus:
        return ";".join(gpus)
    return matrix.policy.pick("cuda_archs", s.torch_cuda) if s.torch_cuda else "80;90"


def _cell_archs_cover(offer: Offer, s: Situation) -> bool:
    sass, ptx = [], []
    for item in offer.cell.cuda_archs.split(";"):
        number = item.removesuffix("+PTX")
        sass.append(f"sm_{number}")
        if item.endswith("+PTX"):
            ptx.append(f"compute_{number}")
    capabilities = {g.capability for g in (*s.facts.gpus, *s.facts.torch.devices) if g.capability}
    return all(compat.check(c, tuple(sass), tuple(ptx)).status == compat.NATIVE for c in capabilities)


# -- planning ---------------------------------------------------------------------------------------


def plan(s: Situation, problems: list[Problem], matrix: Matrix, offers: list[Offer]) -> list[Fix]:
    kinds = tuple(p.kind for p in problems if p.severity == ERROR)
    if not kinds:
        return []
    version = matrix.policy.flash_attn_version
    if "torch-missing" in kinds or "torch-import-failed" in kinds:
        return _fresh(s, kinds, matrix, offers, version)
    if "mixed-channels" in kinds:
        return _one_world(s, kinds, offers)
    fixes: list[Fix] = []
    target = target_of(s)
    if "mixed-conda-pip-torch" in kinds:
        record = s.torch.conda_record
        target = target_of(s, conda_torch=True)
        fixes.append(Fix("pip", f"remove pip's torch so conda's {record.name} {record.version} is the one imported",
                         (_pip(s, "uninstall", "-y", "torch"),
                          _conda(s, [record.channel_name], [f"{record.name} =={record.version} {record.build}"], "--force-reinstall")),
                         resolves=("mixed-conda-pip-torch",)))
    if "cpu-only-torch" in kinds:
        return fixes + _cuda_torch(s, kinds, matrix, offers, version)
    if "libcudart-missing" in kinds:
        fixes.append(_cudart(s))
    kernel_kinds = tuple(k for k in kinds if k in KERNEL_LIBRARY_KINDS)
    if kernel_kinds and s.kernel_pin is not None:
        fixes.append(_kernel_library(s, kernel_kinds))
    # Without a pin to satisfy (a wheel, or files no conda record owns) a whole flash-attn replaces it.
    replaced = tuple(k for k in kinds if k in REPLACE_FLASH_ATTN or (k in kernel_kinds and s.kernel_pin is None))
    if replaced:
        fixes += _replace_flash_attn(s, replaced, target, matrix, offers, version)
    return fixes


def _replace_flash_attn(s: Situation, kinds: tuple[str, ...], target: Target, matrix: Matrix, offers: list[Offer],
                        version: str) -> list[Fix]:
    from_conda = target.world is not None
    exact = matching(offers, target) if from_conda else None
    if exact is not None and ("gpu-arch-missing" not in kinds or _cell_archs_cover(exact, s)):
        fix = conda_install(s, exact, kinds)
        if "glibc-too-old" in kinds and s.facts.system.glibc and vtuple(s.facts.system.glibc) < vtuple(exact.cell.c_stdlib_version):
            fix = replace(fix, notes=(f"this build needs glibc >= {exact.cell.c_stdlib_version}; the system has "
                                      f"{s.facts.system.glibc}, so run it in a newer OS or container",))
        return [fix]
    fixes = []
    build = local_build(s, _archs_for(s, matrix), kinds, version)
    build = replace(build, commands=(*_uninstall_pip_flash_attn(s), *build.commands))
    if from_conda:
        reason = explain_missing(matrix.table, matrix.policy, target.cell_id) if target.cell_id else "the torch build is not known"
        near = closest(offers, target)
        fixes.append(Fix("no-matching-cell", f"faforge has no build for this environment ({reason})",
                         notes=tuple(f"closest: {o.cell.id} ({o.build_glob}): {_conda(s, o.channels, [*o.torch_specs, o.spec])}"
                                     for o in near), resolves=kinds))
    else:
        build = replace(build, notes=(
            f"your {s.torch_words} came from pip ({s.torch.origin}); faforge's packages are conda packages built against "
            "conda's pytorch, so either build flash-attn for this torch or move to a conda environment", *build.notes))
    fixes.append(build)
    if not from_conda:
        near = closest(offers, Target(target.platform, target.python, target.torch, target.cuda, None, "conda-forge"), n=1)
        if near:
            fixes.append(conda_environment(near[0], f"or use a conda environment with faforge's build for cell {near[0].cell.id}", kinds))
    return fixes


def _fresh(s: Situation, kinds: tuple[str, ...], matrix: Matrix, offers: list[Offer], version: str) -> list[Fix]:
    """No usable torch: a new conda environment from the cell closest to the torch that is installed (its
    metadata says which, even when it cannot be imported; else the newest cell for this Python), or pip's
    torch plus a local build."""
    installed = installed_torch(s)
    target = Target(s.facts.system.platform, s.facts.python.minor, installed.torch, installed.cuda, None, "conda-forge")
    near = closest(offers, target, n=1)
    fixes = []
    if near:
        offer = near[0]
        if s.facts.conda is not None:
            fixes.append(conda_install(s, offer, kinds, with_torch=True))
        else:
            fixes.append(conda_environment(offer, f"create a conda environment with torch and faforge's build for cell {offer.cell.id}", kinds))
    if installed.cuda and s.torch.how == "pip":  # a CUDA build already, whose CUDA libraries (nvidia-* wheels) are missing
        fixes.append(_pip_fix(s, f"or reinstall PyPI's torch {installed.torch} with the CUDA {installed.cuda} libraries it "
                                 "requires (nvidia-* wheels), then build flash-attn for it",
                              ("--force-reinstall", f"torch=={s.torch.version}"), kinds))
    else:
        fixes.append(_pip_fix(s, "or install a CUDA build of torch from PyPI here (its Linux wheels are CUDA builds), then build flash-attn for it",
                              ("torch",), kinds))
    return fixes


def installed_torch(s: Situation) -> Target:
    """The release and CUDA of the torch installed here, from its metadata alone (a torch that does not
    import says nothing at run time): the conda record's build string, or a wheel's local version
    (2.4.0+cu121) or the CUDA runtime its METADATA requires (PyPI's 2.4.0: nvidia-cuda-runtime-cu12==12.1.105)."""
    install, none = s.torch, Target(s.facts.system.platform, s.facts.python.minor, None, None, None, None)
    if install.how == "conda" and install.conda_record is not None:
        return replace(none, torch=_release(install.version), cuda=_conda_cuda(install.conda_record.build))
    if install.distribution is None:
        return none
    local = re.search(r"\+cu(\d+)$", install.version or "")
    cuda = f"{local[1][:-1]}.{local[1][-1]}" if local else install.distribution.cuda_runtime
    return replace(none, torch=_release(install.version), cuda=cuda)


def _one_world(s: Situation, kinds: tuple[str, ...], offers: list[Offer]) -> list[Fix]:
    record = s.facts.conda_record("pytorch") or s.facts.conda_record("libtorch")
    world = record.world if record else "conda-forge"
    target = Target(s.facts.system.platform, s.facts.python.minor, _release(record.version) if record else None,
                    _conda_cuda(record.build) if record else None, 0 if world == "pytorch" else 1, world)
    near = closest(offers, target, n=1)
    if not near:
        return [Fix("no-matching-cell", "faforge has no build for this platform and Python", resolves=kinds)]
    offer = near[0]
    return [conda_environment(offer, f"recreate the environment from one world ({offer.cell.world}: channels "
                                     f"{', '.join(offer.channels)}) with faforge's build for cell {offer.cell.id}", kinds)]


def _cuda_torch(s: Situation, kinds: tuple[str, ...], matrix: Matrix, offers: list[Offer], version: str) -> list[Fix]:
    target = Target(s.facts.system.platform, s.facts.python.minor, _release(s.torch_version), None, s.torch_abi,
                    "conda-forge" if s.facts.conda is not None else None)
    near = closest(offers, target, n=1)
    fixes = []
    if s.facts.conda is not None and near:
        fixes.append(conda_install(s, near[0], kinds, with_torch=True))
        return fixes
    release = _release(s.torch_version)
    fixes.append(_pip_fix(s, f"replace the CPU torch with PyPI's CUDA build of torch {release}, then build flash-attn for it",
                          ("--force-reinstall", f"torch=={release}"), kinds,
                          ("PyPI's Linux wheels of torch are CUDA builds; +cpu builds come from download.pytorch.org/whl/cpu",)))
    if near:
        fixes.append(conda_environment(near[0], f"or use a conda environment with faforge's build for cell {near[0].cell.id}", kinds))
    return fixes


def _kernel_library(s: Situation, kinds: tuple[str, ...]) -> Fix:
    """Install the exact kernel build flash-attn pins, from the channel flash-attn came from; conda
    replaces a mismatched build in place."""
    pin, record = s.kernel_pin, s.flash_attn.conda_record
    return Fix("conda-install", f"install the kernel build flash-attn {record.version} requires ({pin})",
               (_conda(s, [record.channel_url], [f"{KERNEL_PACKAGE} =={pin.version} {pin.build}"]),), resolves=kinds)


def _cudart(s: Situation) -> Fix:
    cuda = s.torch_cuda or ""
    major = int(cuda.split(".")[0]) if cuda[:1].isdigit() else None
    if s.facts.conda is not None:
        command = _conda(s, ["conda-forge"], ["cuda-cudart", f"cuda-version =={cuda}"])
    else:
        command = _pip(s, "install", CUDART_WHEELS.get(major, f"nvidia-cuda-runtime-cu{major}"))
    return Fix("conda-install" if s.facts.conda is not None else "pip", f"install the CUDA {cuda} runtime (libcudart.so.{major})",
               (command,), resolves=("libcudart-missing",))
