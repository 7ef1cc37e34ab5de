"""A wheel's honest platform tag: the most compatible manylinux_2_X whose policy covers what its ELF files need.

The policies are auditwheel's own (PyPI's `auditwheel`, its manylinux-policy.json read through
`auditwheel.policy.WheelPolicies`); nothing here copies their tables. What the binaries need is read with
faforge.abi: each file's DT_NEEDED and the symbol versions its DT_VERNEED asks of each library
(GLIBC_2.17 of libc.so.6, GLIBCXX_3.4.21 of libstdc++.so.6, CXXABI_, GCC_), as auditwheel reads them. A
policy fits when
  - its symbol versions cover every version needed (auditwheel's `versioned_symbols_policy`),
  - its library whitelist holds every needed library that is neither external by design nor in the wheel,
  - none of its blacklisted symbols (libz's, old libc's) is imported from the library that blacklists it.
The tag is the fitting policy of highest priority (the lowest glibc). Libraries that torch's wheels, NVIDIA's
wheels or our kernel wheel provide are external by design (EXTERNAL): pip installs them beside ours, and
faforge bundles none of them. auditwheel's `show` calls such a wheel `linux_<arch>` overall because it cannot
find them on the build machine; its symbol tag (`sym_tag`) is ours, and `analyze_wheel_abi` with those
libraries excluded gives our tag (tests/pipwheel/test_manylinux.py runs both on the built wheels).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from faforge.abi.elf import read_elf
from faforge.errors import EXIT_PROBLEMS, FaforgeError
from faforge.family import FLASH_ATTN

if TYPE_CHECKING:
    from auditwheel.policy import Policy, WheelPolicies

# What pip installs beside our wheels, so no wheel of ours carries it or is judged for needing it:
# torch's own libraries (site-packages/torch/lib), the CUDA runtime of NVIDIA's wheels (nvidia/cu13/lib,
# nvidia/cuda_runtime/lib), our kernel library (the kernel wheel) and the interpreter's libpython.
EXTERNAL = (
    "libc10.so",
    "libc10_cuda.so",
    "libtorch.so",
    "libtorch_*.so",
    "libshm.so",
    "libcudart.so.*",
    FLASH_ATTN.kernel_soname,
    "libpython3*.so*",
)
# The dynamic loader is never a dependency to judge (auditwheel's elf_find_versioned_symbols skips it too).
LOADERS = ("ld-linux*", "ld64.so.*")
# A PEP 600 tag spells its glibc floor (manylinux_2_28_x86_64); a legacy alias (manylinux2014_x86_64) is one of
# auditwheel's policies' aliases, and that policy's name is the PEP 600 tag it stands for.
PEP600_TAG = re.compile(r"manylinux_(?P<major>[0-9]+)_(?P<minor>[0-9]+)_(?P<machine>\w+)")


@dataclass(frozen=True)
class PlatformVerdict:
    """The platform tag of a set of ELF files, and the facts it follows from."""

    tag: str  # manylinux_2_28_x86_64
    aliases: tuple[str, ...]  # its legacy names (manylinux2014_x86_64 for 2_17)
    machine: str  # x86_64, aarch64
    needs: tuple[tuple[str, tuple[str, ...]], ...]  # (library, the symbol versions needed of it), sorted
    limiting: tuple[str, ...]  # what the next more compatible policy lacks (GLIBC_2.34, or a library it does not allow)
    system: tuple[str, ...]  # needed libraries the policy allows (libc.so.6, libstdc++.so.6, ...)
    external: tuple[str, ...]  # needed libraries external by design
    inside: tuple[str, ...]  # needed libraries the wheel holds itself


@dataclass(frozen=True)
class LinuxPlatform:
    """What a Linux platform tag says: the machine, and the glibc floor (None for plain linux_<machine>)."""

    machine: str  # x86_64, aarch64
    glibc: str | None  # 2.28


def linux_platform(tag: str) -> LinuxPlatform | None:
    """The machine and glibc floor of a wheel's platform tag: manylinux_2_28_x86_64 (PEP 600), a legacy alias
    (PEP 513/571/599) through auditwheel's policy that names it, or plain linux_<machine>; None for any other tag."""
    if tag.startswith("linux_"):
        return LinuxPlatform(machine=tag.removeprefix("linux_"), glibc=None)
    match = PEP600_TAG.fullmatch(tag)
    if match is None and tag.startswith("manylinux") and "_" in tag:
        try:
            policies = _policies(tag.partition("_")[2], tag)
        except FaforgeError:
            return None
        policy = next((p for p in policies if tag in p.aliases), None)
        match = PEP600_TAG.fullmatch(policy.name) if policy else None
    return LinuxPlatform(machine=match["machine"], glibc=f"{match['major']}.{match['minor']}") if match else None


def is_external(name: str, patterns: Iterable[str] = EXTERNAL) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _policies(machine: str, what: str) -> WheelPolicies:
    from auditwheel.architecture import Architecture  # noqa: PLC0415 (auditwheel: slow to import)
    from auditwheel.libc import Libc  # noqa: PLC0415 (auditwheel: slow to import)
    from auditwheel.policy import WheelPolicies  # noqa: PLC0415 (auditwheel: slow to import)

    try:
        arch = Architecture(machine)
    except ValueError:
        raise FaforgeError(
            f"{what}: ELF files for {machine}, which no manylinux policy covers", hint="build for x86_64 or aarch64"
        ) from None
    return WheelPolicies(libc=Libc.GLIBC, arch=arch)


def _misfit(
    policy: Policy, required: dict[str, set[str]], system: set[str], imported: dict[str, set[str]]
) -> list[str]:
    """What `policy` does not allow of what the files need: versions, libraries, blacklisted symbols."""
    allowed = {f"{prefix}_{v}" for prefix, versions in policy.symbol_versions.items() for v in versions}
    prefixes = set(policy.symbol_versions)
    missing = sorted(
        {v for versions in required.values() for v in versions if v.partition("_")[0] in prefixes and v not in allowed}
    )
    missing += sorted(system - policy.whitelist)
    for library, names in policy.blacklist.items():
        missing += sorted(f"{name} of {library}" for name in imported.get(library, set()) & names)
    return missing


def platform_tag(
    elf_files: Sequence[Path],
    *,
    inside: Iterable[str] = (),
    external: Iterable[str] = EXTERNAL,
    what: str | None = None,
) -> PlatformVerdict:
    """The verdict for the ELF files of one wheel (`inside`: the SONAMEs of libraries the wheel holds)."""
    what = what or ", ".join(p.name for p in elf_files)
    if not elf_files:
        raise FaforgeError(f"{what}: no ELF file to judge", hint="a platform wheel holds at least one compiled file")
    inside, external = set(inside), tuple(external)
    machines: set[str] = set()
    required: dict[str, set[str]] = {}
    needed: set[str] = set()
    imported: dict[str, set[str]] = {}
    for path in elf_files:
        info, symbols = read_elf(path)
        machines.add(info.machine)
        needed.update(n for n in info.needed if not is_external(n, LOADERS))
        undefined = {s.name for s in symbols.undefined()}
        for need in symbols.needs:
            if not is_external(need.file, LOADERS):
                required.setdefault(need.file, set()).update(need.versions)
        for library in info.needed:
            imported.setdefault(library, set()).update(undefined)
    if len(machines) != 1:
        raise FaforgeError(
            f"{what}: ELF files for {', '.join(sorted(machines))} in one wheel",
            hint="a wheel holds one architecture's binaries",
        )
    machine = machines.pop()
    policies = _policies(machine, what)
    outside = {n for n in needed if n not in inside and not is_external(n, external)}
    known = set().union(*(p.whitelist for p in policies if p != policies.linux))
    unknown = sorted(outside - known)
    if unknown:
        raise FaforgeError(
            f"{what}: needs {', '.join(unknown)}, which no manylinux policy allows and no wheel beside ours provides",
            hint="link it statically or drop it: faforge bundles no library (torch's, NVIDIA's and our kernel "
            "wheel's are external by design)",
            exit_code=EXIT_PROBLEMS,
        )
    fitting = policies.versioned_symbols_policy({k: set(v) for k, v in required.items()})
    ranked = sorted(
        (p for p in policies if p != policies.linux and p.priority <= fitting.priority), key=lambda p: -p.priority
    )
    chosen = next((p for p in ranked if not _misfit(p, required, outside, imported)), None)
    if chosen is None:
        newest = max((v for versions in required.values() for v in versions), default="?")
        raise FaforgeError(
            f"{what}: no manylinux policy covers the symbol versions it needs (e.g. {newest})",
            hint="build on an older glibc/libstdc++ (a manylinux image), or update auditwheel if the policy is new",
            exit_code=EXIT_PROBLEMS,
        )
    better = [p for p in policies if p != policies.linux and p.priority > chosen.priority]
    nearest = min(better, key=lambda p: p.priority) if better else None
    limiting = tuple(_misfit(nearest, required, outside, imported)) if nearest else ()
    return PlatformVerdict(
        tag=chosen.name,
        aliases=tuple(chosen.aliases),
        machine=machine,
        needs=tuple(sorted((k, tuple(sorted(v))) for k, v in required.items())),
        limiting=limiting,
        system=tuple(sorted(outside)),
        external=tuple(sorted(n for n in needed if n not in outside and n not in inside)),
        inside=tuple(sorted(inside & needed)),
    )
