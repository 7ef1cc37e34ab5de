"""Can a CUDA binary run on a GPU? CUDA's compatibility rules as a pure function.

The rules (CUDA C++ Programming Guide, "Binary Compatibility" and "Application
Compatibility"; arch-specific and family-specific targets from the CUDA 12.9
release notes, https://docs.nvidia.com/cuda/cuda-c-programming-guide/#binary-compatibility):

* SASS for ``sm_XY`` runs on a GPU of compute capability ``X.Z`` with ``Z >= Y``
  (same major version, equal or newer minor).
* SASS for ``sm_XYa`` (arch-specific, e.g. ``sm_90a``) runs only on ``X.Y`` itself.
* SASS for ``sm_XYf`` (family-specific, e.g. ``sm_100f``) runs on the family:
  same major ``X``, minor ``Z >= Y``.
* PTX for ``compute_XY`` is JIT-compiled by the driver for any GPU of compute
  capability ``>= X.Y``; ``compute_XYa`` / ``compute_XYf`` PTX follow the same
  arch / family limits as their SASS. A JIT'd kernel works, but costs a compile on
  first use and is often slower than SASS built for the GPU, so it is reported as
  such rather than as a pass.

Only the standard library is used: this module also runs from a conda test
environment that has nothing of faforge's dependencies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ARCH = re.compile(r"(?P<kind>sm|compute)_(?P<digits>\d{2,3})(?P<suffix>[af]?)")

NATIVE = "native"  # SASS for this GPU is embedded
JIT = "jit"  # only PTX fits: the driver compiles it at first use (slow)
NONE = "none"  # nothing embedded can run on this GPU


@dataclass(frozen=True, order=True)
class Arch:
    """One embedded target: ``sm_90a`` -> Arch('sm', 9, 0, 'a')."""

    kind: str  # "sm" (SASS) or "compute" (PTX)
    major: int
    minor: int
    suffix: str  # "", "a" (arch-specific) or "f" (family-specific)

    def __str__(self) -> str:
        return f"{self.kind}_{self.major}{self.minor}{self.suffix}"

    def runs_on(self, major: int, minor: int) -> bool:
        """Whether code for this target runs on a GPU of compute capability major.minor."""
        if self.suffix == "a":
            return (major, minor) == (self.major, self.minor)
        if self.suffix == "f" or self.kind == "sm":
            return major == self.major and minor >= self.minor
        return (major, minor) >= (self.major, self.minor)  # plain PTX: this arch or any newer


def parse_arch(name: str, kind: str) -> Arch:
    """'sm_86' -> Arch('sm', 8, 6, ''); the last digit is the minor version (sm_120 is 12.0)."""
    match = _ARCH.fullmatch(name.strip())
    if not match or match["kind"] != kind:
        example = "sm_80, sm_90a, sm_100f" if kind == "sm" else "compute_80, compute_90a"
        raise ValueError(f"{name!r} is not a {'SASS' if kind == 'sm' else 'PTX'} target name like {example}")
    digits = match["digits"]
    return Arch(kind, int(digits[:-1]), int(digits[-1]), match["suffix"])


def gpu_name(capability: tuple[int, int]) -> str:
    """(9, 0) -> 'sm_90'."""
    return f"sm_{capability[0]}{capability[1]}"


@dataclass(frozen=True)
class Compat:
    """The verdict for one binary on one GPU, with the facts it rests on."""

    gpu: str  # "sm_90"
    sass: tuple[str, ...]  # embedded SASS targets, as read
    ptx: tuple[str, ...]  # embedded PTX targets, as read
    status: str  # NATIVE, JIT or NONE
    matching: tuple[str, ...]  # the embedded targets that can run here (SASS if any, else PTX)

    @property
    def can_run(self) -> bool:
        return self.status != NONE

    @property
    def message(self) -> str:
        sass = ", ".join(self.sass) or "none"
        ptx = ", ".join(self.ptx) or "none"
        if self.status == NATIVE:
            return f"{self.gpu} GPU: native SASS {', '.join(self.matching)} embedded"
        if self.status == JIT:
            return (
                f"{self.gpu} GPU: no SASS for it (SASS: {sass}); PTX {', '.join(self.matching)} "
                "will be JIT-compiled by the driver at first use, which is slow"
            )
        return (
            f"{self.gpu} GPU cannot run this binary: it has SASS {sass} and PTX {ptx}, none of which runs on {self.gpu}"
        )

    @property
    def hint(self) -> str | None:
        if self.status == NATIVE:
            return None
        major_minor = self.gpu.removeprefix("sm_")
        return f"rebuild with {major_minor} in the arch list (FLASH_ATTN_CUDA_ARCHS / --archs) to get SASS for this GPU"


def check(capability: tuple[int, int], sass: tuple[str, ...], ptx: tuple[str, ...]) -> Compat:
    """Judge whether code with these embedded targets runs on a GPU of `capability`.

    >>> check((8, 6), ("sm_80",), ()).status
    'native'
    >>> check((9, 0), ("sm_80",), ()).message
    'sm_90 GPU cannot run this binary: it has SASS sm_80 and PTX none, none of which runs on sm_90'
    """
    major, minor = capability
    sass_fit = tuple(str(a) for a in sorted({parse_arch(s, "sm") for s in sass}) if a.runs_on(major, minor))
    ptx_fit = tuple(str(a) for a in sorted({parse_arch(p, "compute") for p in ptx}) if a.runs_on(major, minor))
    if sass_fit:
        status, matching = NATIVE, sass_fit
    elif ptx_fit:
        status, matching = JIT, ptx_fit
    else:
        status, matching = NONE, ()
    return Compat(gpu=gpu_name(capability), sass=tuple(sass), ptx=tuple(ptx), status=status, matching=matching)
