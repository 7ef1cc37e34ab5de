"""A Fix, and the exact commands it runs: conda and pip lines for this environment, an
environment.yml, a local build with the recipe's build script.

Apart from the planning (faforge.doctor.fixes) so that the text of a command is written once,
whichever problem calls for it.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from faforge import paths
from faforge.backend.flags import cxx_standard
from faforge.doctor.offers import Offer, release_of
from faforge.doctor.situation import Situation
from faforge.family import FLASH_ATTN

if TYPE_CHECKING:
    from faforge.doctor.index_check import IndexCheck

# Where the fix for an externally managed Python (PEP 668) creates the venv that pip may install into.
VENV_FOR_EXTERNALLY_MANAGED = f"~/venvs/{FLASH_ATTN.package}"


@dataclass(frozen=True)
class Fix:
    kind: str  # conda-install, conda-environment, pip, pip-install, uv-install, local-build, no-matching-cell
    title: str
    commands: tuple[str, ...] = ()
    environment_yml: str | None = None
    cell: str | None = None
    build_string: str | None = None  # the glob that selects the cell's build
    resolves: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    index_url: str | None = None  # pip-install, uv-install: the wheel index of the cell (BASE/torch2.11-cu130/)
    index_check: IndexCheck | None = None  # whether that index serves the cell's wheel (faforge.doctor.index_check)


def conda_command(s: Situation, offer_channels: list[str], specs: list[str], *extra: str) -> str:
    where = ["-p", s.facts.python.prefix] if s.facts.conda is not None else []
    channels = [arg for c in offer_channels for arg in ("-c", c)]
    return shlex.join(["conda", "install", *where, *extra, *channels, *specs])


def pip_command(s: Situation, *args: str) -> str:
    return shlex.join([s.facts.python.executable, "-m", "pip", *args])


def pip_target(s: Situation) -> tuple[tuple[str, ...], str]:
    """The commands that make a Python pip may install into, and that python: this one, or for an externally
    managed Python (PEP 668: Debian's /usr/bin/python3 refuses `pip install`) a venv created from it."""
    if not s.facts.python.externally_managed:
        return (), s.facts.python.executable
    venv = os.path.expanduser(VENV_FOR_EXTERNALLY_MANAGED)
    return (shlex.join([s.facts.python.executable, "-m", "venv", venv]),), f"{venv}/bin/python"


def externally_managed_note(s: Situation, python: str) -> tuple[str, ...]:
    if python == s.facts.python.executable:
        return ()
    return (
        f"{s.facts.python.executable} is externally managed (PEP 668: pip may not install into it), "
        f"so this creates a venv at {python.removesuffix('/bin/python')} and installs there",
    )


def pip_fix(
    s: Situation, title: str, args: tuple[str, ...], resolves: tuple[str, ...], notes: tuple[str, ...] = ()
) -> Fix:
    """A fix that pip-installs `args`, then runs doctor again on the python that has them."""
    setup, python = pip_target(s)
    commands = (*setup, shlex.join([python, "-m", "pip", "install", *args]))
    return Fix(
        "pip",
        title,
        commands,
        resolves=resolves,
        notes=(*externally_managed_note(s, python), *notes, f"then run `faforge doctor --python {python}` again"),
    )


def environment_yml(offer: Offer, name: str = FLASH_ATTN.package) -> str:
    lines = [
        f"name: {name}",
        "channels:",
        *(f"  - {c}" for c in offer.channels),
        "dependencies:",
        f"  - python {offer.cell.python}.*",
        *(f"  - {r}" for r in offer.torch_specs),
        f"  - {offer.spec}",
    ]
    return "\n".join(lines) + "\n"


def uninstall_pip_flash_attn(s: Situation) -> list[str]:
    return [pip_command(s, "uninstall", "-y", FLASH_ATTN.package)] if s.flash_attn.how == "pip" else []


def conda_install(s: Situation, offer: Offer, resolves: tuple[str, ...], *, with_torch: bool = False) -> Fix:
    specs = [*(offer.torch_specs if with_torch else []), offer.spec]
    return Fix(
        "conda-install",
        f"install faforge's build for cell {offer.cell.id}",
        (*uninstall_pip_flash_attn(s), conda_command(s, offer.channels, specs)),
        environment_yml(offer),
        offer.cell.id,
        offer.build_glob,
        resolves,
    )


def conda_environment(offer: Offer, title: str, resolves: tuple[str, ...]) -> Fix:
    return Fix(
        "conda-environment",
        title,
        ("conda env create -f environment.yml",),
        environment_yml(offer),
        offer.cell.id,
        offer.build_glob,
        resolves,
    )


def local_build(s: Situation, archs: str, resolves: tuple[str, ...], version: str) -> Fix:
    """Build flash-attn against this environment's own torch with the recipe's build script."""
    py = s.facts.python.executable
    script = paths.recipe_dir() / FLASH_ATTN.build_script
    work = f"/tmp/{FLASH_ATTN.package}-build"
    abi = s.torch_abi if s.torch_abi is not None else 1
    commands = (
        shlex.join(
            [
                py,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{FLASH_ATTN.package}=={version}",
                "-d",
                work,
            ]
        ),
        shlex.join(["tar", "-xzf", f"{work}/{FLASH_ATTN.dist_name}-{version}.tar.gz", "-C", work]),
        shlex.join(
            [
                py,
                str(script),
                "--source-dir",
                f"{work}/{FLASH_ATTN.dist_name}-{version}",
                "--archs",
                archs,
                "--cxx11-abi",
                str(abi),
                "--wheel-dir",
                f"{work}/dist",
            ]
        ),
        f"{shlex.join([py, '-m', 'pip', 'install', '--no-deps'])} {work}/dist/{FLASH_ATTN.dist_name}-*.whl",
    )
    standard = cxx_standard(release) if (release := release_of(s.torch_version)) else "C++17 or C++20"
    notes = (
        f"needs nvcc for CUDA {s.torch_cuda or '?'}, ninja and a {standard.upper()} compiler (what the build script "
        f"uses for {s.torch_words}); one arch takes 1.5-2 h on 2 cores",
    )
    return Fix(
        "local-build",
        f"build {FLASH_ATTN.package} {version} against this {s.torch_words} (archs {archs})",
        commands,
        resolves=resolves,
        notes=notes,
    )
