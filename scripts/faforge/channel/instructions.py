"""The exact lines a user runs to install one package: a conda command and an environment.yml.

`faforge page` shows them per cell, docs/hosting.md shows them for a channel served over HTTP, and
the tests solve and install exactly these lines with py-rattler, so they cannot drift apart.
"""

from __future__ import annotations

import shlex

from faforge.family import FLASH_ATTN


def match_spec(name: str, version: str, build: str) -> str:
    """name=version=build: conda's exact-build spec, also parsed by mamba, pixi and py-rattler."""
    return f"{name}={version}={build}"


def conda_command(spec: str, channels: list[str]) -> str:
    """--override-channels: only these channels, in this (strict) priority order."""
    words = ["conda", "install", "--override-channels"]
    for channel in channels:
        words += ["-c", channel]
    return " ".join(words) + " " + shlex.quote(spec)


def environment_yml(spec: str, channels: list[str], name: str = FLASH_ATTN.package) -> str:
    lines = [f"name: {name}", "channels:", *(f"  - {c}" for c in channels), "dependencies:", f"  - {spec}"]
    return "\n".join(lines) + "\n"
