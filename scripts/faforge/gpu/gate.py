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
import os
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from faforge.family import FLASH_ATTN
from faforge.gpu.compat import JIT, Compat, check
from faforge.kernels.tus import HEAD_DIMS

EXTENSION = FLASH_ATTN.extension
# What the package under test declares, set by `faforge test-gpu --declared-archs/--declared-head-dims` (or
# by hand for `python -m faforge.gpu.run_suite`): the cell's arch list in the build script's syntax
# ("80;90;120+PTX", as FLASH_ATTN_CUDA_ARCHS) and its head dims. The suite tests the declared head dims,
# not those found in the binary, so a build that lost one fails instead of running fewer tests.
DECLARED_ARCHS_ENV = "FAFORGE_GPU_DECLARED_ARCHS"
DECLARED_HEAD_DIMS_ENV = "FAFORGE_GPU_DECLARED_HEAD_DIMS"
# Every cell's build compiles all kernel TUs of the sdist: flash-attn 2.x's head dims
# (csrc/flash_attn/src/flash_fwd_hdim{32,64,96,128,192,256}_*.cu in 2.8.3.post2).
DEFAULT_HEAD_DIMS = HEAD_DIMS
_DECLARED_ARCH = re.compile(r"(?:sm_)?(\d{2,3})([af]?)(\+PTX)?")
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
    head_dims: tuple[int, ...] = DEFAULT_HEAD_DIMS  # declared: what the suite tests
    built_head_dims: tuple[int, ...] = ()  # found in the binary's symbols
    declared_archs: tuple[str, ...] = ()
    defects: tuple[str, ...] = field(default=())  # the binary lacks what its package declares: a failure
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        data = asdict(self)
        data["capability"] = list(self.capability) if self.capability else None
        for name in ("head_dims", "built_head_dims", "declared_archs", "defects", "notes"):
            data[name] = list(getattr(self, name))
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
    head_dims = declaration()[1]
    try:
        import torch  # noqa: PLC0415  (lazy: the faforge CLI must start without torch)
    except ImportError as exc:
        return Gate(
            False,
            f"torch is not importable ({exc}); install a CUDA build of torch to test {FLASH_ATTN.package}",
            head_dims=head_dims,
        )
    found = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "head_dims": head_dims}
    if torch.version.cuda is None:
        return Gate(False, f"torch {torch.__version__} is a CPU build; a CUDA build of torch is needed", **found)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return Gate(False, f"no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda})", **found)
    found["capability"] = torch.cuda.get_device_capability(0)
    found["device"] = torch.cuda.get_device_name(0)
    where = f"{found['device']} (sm_{found['capability'][0]}{found['capability'][1]})"
    extension = extension_path()
    if extension is None:
        return Gate(
            False, f"{FLASH_ATTN.module} is not installed (no {EXTENSION} module) on a machine with {where}", **found
        )
    found["extension"] = str(extension)
    return judge_binary(where, found, built_head_dims(extension), read_embedded_archs(extension))


def _entries(text: str, name: str, what: str) -> list[str]:
    """The entries of a ';'/','-separated list; an empty one (',', '80;;90', '90;') is refused, as a
    degenerate gate list is: it means a value was lost on its way here (the untrusted-input rules)."""
    parts = [p.strip() for p in re.split(r"[;,]", text.strip())]
    if not text.strip() or any(not p for p in parts):
        raise ValueError(f"{name}={text!r} names an empty {what}")
    return [q for p in parts for q in p.split()]


def parse_declared_archs(text: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """'80;90;120+PTX' (the build script's --archs) -> SASS ('sm_80', 'sm_90', 'sm_120'), PTX ('compute_120',)."""
    sass, ptx = [], []
    for part in _entries(text, DECLARED_ARCHS_ENV, "arch"):
        match = _DECLARED_ARCH.fullmatch(part)
        if not match:
            raise ValueError(f"{DECLARED_ARCHS_ENV}: {part!r} is not an arch like 90, 90a or 120+PTX")
        sass.append(f"sm_{match[1]}{match[2]}")
        if match[3]:
            ptx.append(f"compute_{match[1]}{match[2]}")
    return tuple(sass), tuple(ptx)


def declaration() -> tuple[tuple[tuple[str, ...], tuple[str, ...]] | None, tuple[int, ...]]:
    """(declared SASS and PTX, or None when nothing is declared; declared head dims) from the environment."""
    archs = os.environ.get(DECLARED_ARCHS_ENV, "").strip()
    dims = os.environ.get(DECLARED_HEAD_DIMS_ENV, "").strip()
    try:
        head_dims = (
            tuple(sorted({int(d) for d in _entries(dims, DECLARED_HEAD_DIMS_ENV, "head dim")}))
            if dims
            else DEFAULT_HEAD_DIMS
        )
        if min(head_dims) < 1:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"{DECLARED_HEAD_DIMS_ENV}={dims!r} is not a comma-separated list of head dims (positive integers)"
        ) from None
    return (parse_declared_archs(archs) if archs else None), head_dims


def judge_binary(
    where: str, found: dict, built: tuple[int, ...], archs: tuple[tuple[str, ...], tuple[str, ...]] | None
) -> Gate:
    """The verdict once device and extension are known: the embedded code against the GPU, the binary against
    its package's declaration. A binary that lacks what its package declares is a defect (the suite fails),
    not a reason to skip."""
    declared_archs, head_dims = declaration()
    facts = dict(
        found,
        head_dims=head_dims,
        built_head_dims=built,
        declared_archs=declared_archs[0] + declared_archs[1] if declared_archs else (),
    )
    defects, notes = [], []
    missing = sorted(set(head_dims) - set(built))
    if not built:
        notes.append(
            f"no run_mha_fwd_ symbols in {Path(found['extension']).name}; declared head dims not checked against it"
        )
    elif missing:
        defects.append(
            f"head dims {missing} declared but {Path(found['extension']).name} "
            f"has no forward kernels for them (it has {list(built)})"
        )
    if archs is None:
        notes.append(
            "embedded SASS/PTX not read (faforge.abi.fatbin unavailable); a missing kernel shows as test errors"
        )
        return Gate(True, f"{where}; arch check not done", defects=tuple(defects), notes=tuple(notes), **facts)
    verdict = check(found["capability"], *archs)
    if not verdict.can_run:
        if declared_archs and check(found["capability"], *declared_archs).can_run:
            defects.append(
                f"the package declares {', '.join(facts['declared_archs'])}, "
                f"which covers {verdict.gpu}, but {verdict.message}"
            )
        return Gate(
            False,
            f"{verdict.message} ({verdict.hint})",
            compat=verdict,
            defects=tuple(defects),
            notes=tuple(notes),
            **facts,
        )
    if verdict.status == JIT:
        notes.append(verdict.message)
    return Gate(
        True, f"{where}; {verdict.message}", compat=verdict, defects=tuple(defects), notes=tuple(notes), **facts
    )
