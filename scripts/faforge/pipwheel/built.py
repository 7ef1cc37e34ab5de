"""What packing a wheel returns: the file, its facts, and what it was judged by."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from faforge.abi.fatbin import GpuArchs
from faforge.pipwheel.facts import WheelFacts
from faforge.pipwheel.manylinux import PlatformVerdict


@dataclass(frozen=True)
class BuiltWheel:
    path: Path
    facts: WheelFacts
    verdict: PlatformVerdict  # the platform tag and the symbol versions it follows from
    runpath: tuple[str, ...]  # what the wheel's binary was given
    gpu: GpuArchs  # the GPU code it holds (none for a glue: its kernels are the kernel wheel's)
    seconds: float
