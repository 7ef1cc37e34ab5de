"""A kind of wheel a family makes and verifies: its project, how its local label reads, and how it is packed.

A family lists its kinds (its `verify` namespace's `wheels`); `faforge wheel KIND` packs one and `faforge verify`
reads a wheel's kind from its project. The label shapes are faforge.wheelnames': a pip cell's
(torch2.14.cu130.abi1), a kernel build's (cu130.sm80.90.100.120ptx.philox64.h<hash>), a CUDA and arch list
(cu130.sm80.90a), or none (a pure-Python wheel).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.pipwheel.built import BuiltWheel

CELL_LABEL, KERNEL_LABEL, ARCHS_LABEL, NO_LABEL = "cell", "kernel", "cuda-archs", "none"


@dataclass(frozen=True)
class WheelKind:
    kind: str  # the word `faforge wheel KIND` and verify's messages use
    project: str  # the wheel's PyPI project
    label: str  # how its local label reads: one of the shapes above
    usage: str  # `faforge wheel --help`'s usage of it after `faforge wheel KIND`
    makes: str  # ... the line below it: what that makes
    what: str  # ... its words for KIND
    source: str  # ... and for its SOURCE
    options: frozenset[str]  # the `faforge wheel` options it takes (argparse dests); the rest are refused
    required: tuple[str, ...]  # those of them it needs
    pack: Callable[[argparse.Namespace, Path], BuiltWheel]  # (args, a work folder) -> the wheel written
    kept: str  # what the summary line says packing kept of the binary
