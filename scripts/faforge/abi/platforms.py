"""Where faforge's binaries run, spelled once: a conda subdir and its machine, the name `uname -m`, an ELF header
(as faforge.abi.elf names it) and a wheel's platform tag give it. It lives in abi/, the lowest layer the recipes
ship (with the checker and the build backend), so every layer above reads it and no recipe lists another file."""

from __future__ import annotations

# conda subdir -> machine, for every Linux subdir the ABI gate checks a binary for and the backend finds a CUDA
# toolchain for; faforge builds and publishes the first two (PLATFORMS).
SUBDIR_MACHINE = {"linux-64": "x86_64", "linux-aarch64": "aarch64", "linux-ppc64le": "ppc64le"}
# The platforms faforge builds and publishes, in the order every listing shows them.
PLATFORMS = ("linux-64", "linux-aarch64")
# Each of them -> its machine, and back: a machine builds its own platform natively.
PLATFORM_MACHINE = {platform: SUBDIR_MACHINE[platform] for platform in PLATFORMS}
MACHINE_PLATFORM = {machine: platform for platform, machine in PLATFORM_MACHINE.items()}
