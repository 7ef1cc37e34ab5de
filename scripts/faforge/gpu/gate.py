"""Is there a GPU here that the installed flash-attn can be tested on? Facts first, then a verdict.

Everything the GPU suite, `faforge test-gpu` and `faforge bench-gpu` run is
behind this gate. When it is closed they skip (exit 3, "not verified") and say
why; a missing GPU must never read as a pass. The order of the checks is the
order a person would debug them in: torch, a CUDA build of torch, a device,
flash-attn's extension, then whether the extension's embedded SASS/PTX can run
on that device (faforge.gpu.compat).

Only the standard library is imported at module level, and torch lazily, so the
gate also runs from a conda test environment holding just torch, pytest,
einops and flash_attn (the arch table is read only if faforge.abi.fatbin and
the pyelftools it needs are importable, as in the recipe's GPU test; otherwise
the check is noted as not done).
"""

from __future__ import annotations

import importlib.util
import mmap
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from faforge.gpu.compat import JIT, Compat, check

EXTENSION = "flash_attn_2_cuda"
# Head dims flash-attn 2.x compiles kernels for (csrc/flash_attn/src/flash_fwd_hdim{32,64,96,128,192,256}_*.cu
# in the 2.8.3 sdist); used only when the extension cannot be read, e.g. to name skipped tests.
DEFAULT_HEAD_DIMS = (32, 64, 96, 128, 192, 256)
# run_mha_fwd_<cutlass::half_t, 128, false>(...) is mangled as _Z12run_mha_fwd_IN7cutlass6half_tELi128ELb0EE...;
# the extension exports one such host function per compiled head dim.
_FWD_KERNEL_SYMBOL = re.compile(rb"run_mha_fwd_IN7cutlass(?:6half_t|10bfloat16_t)ELi(\d+)ELb[01]E")


@dataclass(frozen=True)
class Gate:
    """What was found and whether the suite can run. `reason` is printed verbatim on a skip."""

    usable: bool
    reason: str
    torch: str | None = None
    torch_cuda: str | None = None
    device: str | None = None
    capability: tuple[int, int] | None = None
    extension: str | None = None
    compat: Compat | None = None
    head_dims: tuple[int, ...] = DEFAULT_HEAD_DIMS
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        data = asdict(self)
        data["capability"] = list(self.capability) if self.capability else None
        data["head_dims"] = list(self.head_dims)
        data["notes"] = list(self.notes)
        if self.compat is not None:
            data["compat"] = {
                "gpu": self.compat.gpu,
                "status": self.compat.status,
                "sass": list(self.compat.sass),
                "ptx": list(self.compat.ptx),
                "matching": list(self.compat.matching),
                "message": self.compat.message,
            }
        return data


def extension_path() -> Path | None:
    """Where flash-attn's CUDA extension would be loaded from, found without importing it."""
    spec = importlib.util.find_spec(EXTENSION)
    return Path(spec.origin) if spec is not None and spec.origin else None


def built_head_dims(path: Path) -> tuple[int, ...]:
    """Head dims the extension has forward kernels for, read from its exported symbol names."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return tuple(sorted({int(m.group(1)) for m in _FWD_KERNEL_SYMBOL.finditer(data)}))


def read_embedded_archs(path: Path) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(SASS, PTX) targets embedded in `path`, or None when faforge's fatbin reader is not importable."""
    try:
        from faforge.abi.fatbin import read_gpu_archs  # noqa: PLC0415  (needs pyelftools; may be absent)
    except ImportError:
        return None
    archs = read_gpu_archs(path)
    return archs.sass, archs.ptx


@lru_cache(maxsize=1)
def evaluate() -> Gate:
    """Run the checks once per process (the suite's modules and the CLI all ask)."""
    try:
        import torch  # noqa: PLC0415  (lazy: the faforge CLI must start without torch)
    except ImportError as exc:
        return Gate(False, f"torch is not importable ({exc}); install a CUDA build of torch to test flash-attn")
    found = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if torch.version.cuda is None:
        return Gate(False, f"torch {torch.__version__} is a CPU build; a CUDA build of torch is needed", **found)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return Gate(False, f"no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda})", **found)
    found["capability"] = torch.cuda.get_device_capability(0)
    found["device"] = torch.cuda.get_device_name(0)
    where = f"{found['device']} (sm_{found['capability'][0]}{found['capability'][1]})"
    extension = extension_path()
    if extension is None:
        return Gate(False, f"flash_attn is not installed (no {EXTENSION} module) on a machine with {where}", **found)
    found["extension"] = str(extension)
    built = built_head_dims(extension)
    head_dims = built or DEFAULT_HEAD_DIMS
    notes = [] if built else [f"no run_mha_fwd_ symbols in {extension.name}; testing flash-attn 2's default head dims"]
    archs = read_embedded_archs(extension)
    if archs is None:
        notes.append("embedded SASS/PTX not read (faforge.abi.fatbin unavailable); a missing kernel shows as test errors")
        return Gate(True, f"{where}; arch check not done", head_dims=head_dims, notes=tuple(notes), **found)
    verdict = check(found["capability"], *archs)
    if not verdict.can_run:
        return Gate(False, f"{verdict.message} ({verdict.hint})", compat=verdict, head_dims=head_dims, **found)
    if verdict.status == JIT:
        notes.append(verdict.message)
    return Gate(True, f"{where}; {verdict.message}", compat=verdict, head_dims=head_dims, notes=tuple(notes), **found)
