"""The lines that put an environment on FlashAttention-4's known-good set (variants/flash-attn-4.yaml): the pip (or
uv) line of the set's exact pins from PyPI, the same set from faforge's wheel index, and for a conda prefix the
conda line. Each keeps the installed torch (pinned to its release) where a set exists for it.

Why exact pins from PyPI first: every name in a set is PyPI's own project (flash-attn-4 included), so the line
needs no other index and installs exactly what was gated; the index line gives the same set through one
locally-versioned wheel (flash-attn-4==4.0.0b40+cu130.torch2.14, whose metadata pins it: faforge.pipindex), as the
page does. No `--pre`: the pre-release is pinned exactly.
"""

from __future__ import annotations

import shlex

from faforge import config
from faforge.doctor.facts import EnvFacts
from faforge.doctor.fix_commands import Fix
from faforge.doctor.installs import UV_VENV, environment_kind
from faforge.families.flash_attn_4.sets import Fa4Data, KnownGoodSet
from faforge.family import FLASH_ATTN_4
from faforge.pipindex import instructions

HEAL = "known-good-set"


def torch_pin(facts: EnvFacts, kgs: KnownGoodSet) -> str:
    """torch==2.14.1 (the installed release, kept) where the set is this torch's; else the set's torch minor."""
    version = (facts.torch.version or "").split("+", 1)[0]
    same = facts.torch.imported and (version == kgs.torch or version.startswith(kgs.torch + "."))
    return f"torch=={version}" if same else f"torch=={kgs.torch}.*"


def pins(data: Fa4Data, kgs: KnownGoodSet, facts: EnvFacts) -> list[str]:
    return [torch_pin(facts, kgs), f"{FLASH_ATTN_4.package}=={kgs.version}", *data.requirements(kgs)]


def index_line(facts: EnvFacts, kgs: KnownGoodSet) -> str:
    """The same set from faforge's index of this torch minor and CUDA (BASE/torch2.14-cu130/)."""
    wheel = f"{FLASH_ATTN_4.package}=={kgs.version}+{kgs.local_label}"
    index = instructions.index_url(kgs.id)
    python = facts.python.executable
    return shlex.join([python, "-m", "pip", "install", "--extra-index-url", index, torch_pin(facts, kgs), wheel])


def conda_line(facts: EnvFacts, kgs: KnownGoodSet) -> str:
    """The conda package of the set (its run requirements are the set) beside this prefix's torch."""
    torch = torch_pin(facts, kgs).removeprefix("torch==")
    specs = [f"{FLASH_ATTN_4.package} =={kgs.version}", f"pytorch =={torch}"]
    channels = ["-c", config.public_channel(), "-c", "conda-forge"]
    return shlex.join(["conda", "install", "-p", facts.python.prefix, *channels, *specs])


def heal(data: Fa4Data, kgs: KnownGoodSet, facts: EnvFacts, resolves: tuple[str, ...]) -> Fix:
    """The fix that installs set `kgs` into this environment, by its own installer."""
    python = facts.python.executable
    again = f"then run `faforge doctor --python {python}` again"
    level = kgs.level or "not yet gated"
    title = f"install {FLASH_ATTN_4.package} {kgs.version} with its known-good set {kgs.id} ({level})"
    exact = pins(data, kgs, facts)
    if facts.conda is not None:
        pip = shlex.join([python, "-m", "pip", "install", *exact])
        return Fix(HEAL, title, (conda_line(facts, kgs),), resolves=resolves, notes=(f"or with pip: {pip}", again))
    if environment_kind(facts) == UV_VENV:
        line = shlex.join(["uv", "pip", "install", "--python", python, *exact])
    else:
        line = shlex.join([python, "-m", "pip", "install", *exact])
    return Fix(
        HEAL,
        title,
        (line,),
        resolves=resolves,
        index_url=instructions.index_url(kgs.id),
        notes=(f"or from faforge's index: {index_line(facts, kgs)}", again),
    )
