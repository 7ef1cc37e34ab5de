"""How torch and flash-attn got into the environment, and what their package names claim.

conda and pip both leave a .dist-info; only conda also leaves a conda-meta
record that lists that .dist-info among its files. So a torch whose active
.dist-info no conda record owns came from pip, whatever conda-meta says, and
that is exactly the "mixed conda/pip torch" state.

Package names claim what a binary was built for: our conda build strings
(py312_torch2_7_cu129_cxx11abi1_h<hash>_0) and upstream's wheel names
(flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-...). A claim is only a claim:
the doctor compares it with what the binary's symbols say.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote

from faforge.doctor.facts import CondaRecord, Distribution, EnvFacts
from faforge.family import FLASH_ATTN

# Our build strings (recipes/flash-attn/recipe.yaml, build.string).
FAFORGE_BUILD = re.compile(
    r"py(?P<py>\d)(?P<pyminor>\d+)_torch(?P<tmaj>\d+)_(?P<tmin>\d+)_cu(?P<cuda>\d+)_cxx11abi(?P<abi>[01])_"
)
# Upstream release wheels: flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl
UPSTREAM_WHEEL = re.compile(
    r"\+cu(?P<cuda>\d+)torch(?P<torch>\d+\.\d+)cxx11abi(?P<abi>TRUE|FALSE)(?:-cp(?P<py>\d)(?P<pyminor>\d+))?"
)
TORCH_CONDA_PACKAGES = ("pytorch", "libtorch")
# How the environment itself was made, which decides the installer of its fixes (faforge.doctor.pip_fixes).
CONDA, UV_VENV, VENV, EXTERNALLY_MANAGED, SYSTEM = "conda", "uv-venv", "venv", "externally-managed", "system"


@dataclass(frozen=True)
class Claim:
    """What a package's name says its binary was built for."""

    source: str  # "conda build string" or "wheel name"
    text: str
    python: str | None
    torch_minor: str | None
    cuda: str | None  # "12.9", or just the major ("12") from upstream wheel names
    cxx11_abi: int | None


@dataclass(frozen=True)
class Install:
    """One package as installed: which copy is active, and where it came from."""

    name: str
    how: str | None  # "conda", "pip", "unknown" (files without metadata), None (absent)
    version: str | None
    distribution: Distribution | None  # the active .dist-info (first on sys.path)
    conda_record: CondaRecord | None
    others: tuple[Distribution, ...]  # further .dist-infos of the same name (shadowed copies)
    origin: str | None  # channel, wheel URL or installer, in words

    @property
    def installed(self) -> bool:
        return self.how is not None


def _owned_by_conda(dist: Distribution, facts: EnvFacts) -> CondaRecord | None:
    rel = os.path.relpath(dist.path, facts.python.prefix)
    return next((r for r in facts.conda or () if rel in r.dist_infos), None)


def _install(name: str, conda_names: tuple[str, ...], facts: EnvFacts, present: bool) -> Install:
    dists = facts.distributions_of(name)
    record = next((facts.conda_record(n) for n in conda_names if facts.conda_record(n)), None)
    if not dists:
        how = ("conda" if record else "unknown") if present else None
        origin = (
            f"conda channel {record.channel_name} ({record.name} {record.version} {record.build})" if record else None
        )
        return Install(name, how, record.version if record else None, None, record, (), origin)
    active = _active(dists, facts.torch.version if name == "torch" else None)
    owner = _owned_by_conda(active, facts)
    if owner is not None:
        how, origin, record = (
            "conda",
            f"conda channel {owner.channel_name} ({owner.name} {owner.version} {owner.build})",
            owner,
        )
    else:
        how = "pip" if (active.installer or "pip").lower() != "conda" else "conda"
        origin = (
            unquote(active.direct_url)
            if active.direct_url
            else f"installed by {active.installer or 'an unknown installer'}"
        )
    return Install(name, how, active.version, active, record, tuple(d for d in dists if d is not active), origin)


def _active(dists: tuple[Distribution, ...], runtime_version: str | None) -> Distribution:
    """The .dist-info of the copy that is imported: the one whose version the running module reports
    (a half-removed copy may sort first), else the first on sys.path."""
    release = (runtime_version or "").split("+", 1)[0]
    return next((d for d in dists if release and (d.version or "").split("+", 1)[0] == release), dists[0])


def torch_install(facts: EnvFacts) -> Install:
    return _install(
        "torch", TORCH_CONDA_PACKAGES, facts, present=facts.torch_package is not None or facts.torch.imported
    )


def flash_attn_install(facts: EnvFacts, package: str = FLASH_ATTN.package) -> Install:
    """flash-attn as installed, or `package`, another distribution of its extension (faforge.doctor.other_builds)."""
    present = bool(facts.extension or facts.extension_files)
    return _install(package, (package,), facts, present=present)


def claim(install: Install) -> Claim | None:
    """What the installed package's build string or wheel name says it was built for."""
    if install.how == "conda" and install.conda_record is not None:
        build = install.conda_record.build
        match = FAFORGE_BUILD.match(build)
        if match:
            cuda = match["cuda"]
            return Claim(
                "conda build string",
                build,
                f"{match['py']}.{match['pyminor']}",
                f"{match['tmaj']}.{match['tmin']}",
                f"{cuda[:-1]}.{cuda[-1]}",
                int(match["abi"]),
            )
        return None
    for text in (install.distribution.direct_url if install.distribution else None, install.version):
        text = unquote(text or "")
        match = UPSTREAM_WHEEL.search(text)
        if match:
            python = f"{match['py']}.{match['pyminor']}" if match["py"] else None
            digits = match["cuda"]  # cu12 (2.6+) is a major only; cu118, cu122 (older) carry the minor too
            cuda = f"{digits[:-1]}.{digits[-1]}" if len(digits) >= 3 else digits
            return Claim(
                "wheel name", os.path.basename(text), python, match["torch"], cuda, 1 if match["abi"] == "TRUE" else 0
            )
    return None


def environment_kind(facts: EnvFacts) -> str:
    """conda (a prefix with conda-meta/), uv-venv (pyvenv.cfg has uv's `uv = X` line, or uv installed its torch),
    venv, externally-managed (a system Python under PEP 668) or system (a Python pip installs into directly)."""
    if facts.conda is not None:
        return CONDA
    venv = facts.python.venv
    if venv is None:
        return EXTERNALLY_MANAGED if facts.python.externally_managed else SYSTEM
    torch = facts.distributions_of("torch")
    if "uv" in venv or (torch and (torch[0].installer or "").lower() == "uv"):
        return UV_VENV
    return VENV
