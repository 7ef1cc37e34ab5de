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

    def to_json(self) -> dict:
        """The wheel, its platform tag and why, its RUNPATH and GPU code, as `faforge wheel --json` shows them."""
        facts, verdict = self.facts, self.verdict
        return {
            "wheel": {
                "path": str(self.path),
                "filename": facts.filename,
                "name": facts.name,
                "version": facts.version,
                "local": facts.local,
                "build_tag": facts.build_tag,
                "python_tags": list(facts.python_tags),
                "abi_tags": list(facts.abi_tags),
                "platform_tags": list(facts.platform_tags),
                "requires_python": facts.requires_python,
                "requires_dist": list(facts.requires_dist),
                "sha256": facts.sha256,
                "size": facts.size,
            },
            "platform": {
                "tag": verdict.tag,
                "aliases": list(verdict.aliases),
                "machine": verdict.machine,
                "needs": {lib: list(versions) for lib, versions in verdict.needs},
                "limiting": list(verdict.limiting),
                "system": list(verdict.system),
                "external": list(verdict.external),
            },
            "runpath": list(self.runpath),
            "gpu": {"sass": list(self.gpu.sass), "ptx": list(self.gpu.ptx)},
        }
