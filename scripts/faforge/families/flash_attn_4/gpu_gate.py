"""Can the installed flash-attn-4 be tested on this GPU? The FA4 counterpart of faforge.gpu.gate.

FA4 is one pure-Python wheel whose kernels the CuTe DSL compiles on first call, so there is no binary to read:
the gate checks, in the order a person debugs, torch, a CUDA torch, a device, the device's arch against FA4's
own check, every package of FA4's import path (versions from their distribution metadata:
`flash_attn.cute.__version__` is always 0.0.0), that `flash_attn.cute` is flash-attn-4's own files (flash-attn 2
ships a `flash_attn/cute/` of its own, and a regular `flash_attn` package hides FA4's namespace portion), and
finally that it imports. Any of these closed means nothing was verified: exit 3, never 0.
Standard library at module level: test-gpu imports it on the GPU machine.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

from faforge.family import FLASH_ATTN, FLASH_ATTN_4

# FA4's own arch check for what this suite runs (forward and backward): its backward asserts
# `arch // 10 in [9, 10, 11, 12]` (flash_attn/cute/interface.py, 4.0.0b40); the forward also takes 8.x.
SUPPORTED_MAJORS = (9, 10, 11, 12)
# Head dims FA4 runs on every supported arch (_validate_head_dims: 8..128 on SM100/SM110, 8..256 on SM90).
HEAD_DIMS = (64, 128)
# What `import flash_attn.cute` needs, by distribution name: its Requires-Dist, cutlass-dsl's libs, and the two
# imports nobody declares (packaging: torch-c-dlpack-ext; triton: quack).
IMPORT_PATH = (
    FLASH_ATTN_4.package,
    "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-base",
    "nvidia-cutlass-dsl-libs-core",
    "cuda-bindings",
    "quack-kernels",
    "apache-tvm-ffi",
    "torch-c-dlpack-ext",
    "einops",
    "packaging",
    "triton",
)
# The DSL's CUDA flavours: it loads the highest one not newer than the driver, so one is enough.
FLAVOURS = ("nvidia-cutlass-dsl-libs-cu13", "nvidia-cutlass-dsl-libs-cu12")
# The module whose file tells FA4's `flash_attn.cute` from flash-attn 2's copy (both ship it).
PROBE = f"{FLASH_ATTN_4.module.replace('.', '/')}/interface.py"


@dataclass(frozen=True)
class Fa4Gate:
    """What was found and whether the FA4 suite can run; `reason` is printed verbatim on a skip."""

    usable: bool
    reason: str
    torch: str | None = None
    device: str | None = None
    capability: tuple[int, int] | None = None
    versions: dict[str, str | None] = field(default_factory=dict)  # distribution -> version from its metadata
    defects: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # first call of each kernel, in seconds (the DSL's compile), filled while the suite or the benchmark runs
    first_calls: dict[str, float] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        return {
            "usable": self.usable,
            "reason": self.reason,
            "torch": self.torch,
            "device": self.device,
            "capability": list(self.capability) if self.capability else None,
            "versions": self.versions,
            "defects": list(self.defects),
            "notes": list(self.notes),
            "first_calls": self.first_calls,  # the live record: bench-gpu writes its JSON after its runs
        }


def installed_versions(names: tuple[str, ...] = IMPORT_PATH + FLAVOURS) -> dict[str, str | None]:
    """{distribution: its version, None where not installed}, read from metadata only (nothing imported)."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def missing(versions: dict[str, str | None]) -> list[str]:
    """The import path's distributions that are not installed (a CUDA flavour of cutlass-dsl counts once)."""
    absent = [name for name in IMPORT_PATH if versions.get(name) is None]
    if not any(versions.get(name) for name in FLAVOURS):
        absent.append(" or ".join(FLAVOURS))
    return absent


def arch_verdict(capability: tuple[int, int]) -> str | None:
    """Why FA4 cannot run forward and backward on this arch, or None where it can."""
    if capability[0] in SUPPORTED_MAJORS:
        return None
    supported = ", ".join(f"{major}.x" for major in SUPPORTED_MAJORS)
    return (
        f"sm_{capability[0]}{capability[1]} is outside what {FLASH_ATTN_4.package} runs forward and backward on "
        f"(its own check: compute capability {supported}; Hopper and Blackwell)"
    )


def foreign_copy(module_file: str | None) -> str | None:
    """Why `flash_attn.cute` (its interface.py at `module_file`) is not flash-attn-4's file, or None: the file's
    sha256 must be the one flash-attn-4's RECORD lists."""
    try:
        dist = metadata.distribution(FLASH_ATTN_4.package)
    except metadata.PackageNotFoundError:
        return f"{FLASH_ATTN_4.package} is not installed"
    record = next((f for f in dist.files or () if f.as_posix() == PROBE), None)
    if record is None or record.hash is None:
        return f"{FLASH_ATTN_4.package}'s RECORD lists no hash for {PROBE}"
    if module_file is None:
        return f"{FLASH_ATTN_4.module} has no {PROBE} here"
    digest = base64.urlsafe_b64encode(hashlib.sha256(Path(module_file).read_bytes()).digest()).rstrip(b"=").decode()
    if digest != record.hash.value:
        return (
            f"{FLASH_ATTN_4.module} resolves to {module_file}, which is not {FLASH_ATTN_4.package}'s file "
            f"(another package's copy, e.g. {FLASH_ATTN.title}'s, shadows or overwrote it)"
        )
    return None


def probe_file() -> str | None:
    """The PROBE file `import` would load, found without importing anything (the shared package's locations, in
    order: a regular package has one, a namespace package one per portion)."""
    try:
        spec = importlib.util.find_spec(FLASH_ATTN_4.namespace)
    except (ImportError, ValueError):
        return None
    relative = PROBE.split("/", 1)[1]
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / relative).is_file():
            return str(Path(location) / relative)
    return None


@lru_cache(maxsize=1)
def evaluate() -> Fa4Gate:
    """Run the checks once per process (the suite's modules, bench-gpu and test-gpu all ask)."""
    versions = installed_versions()
    try:
        import torch  # noqa: PLC0415  (lazy: the CLI must start without torch)
    except ImportError as exc:
        why = f"torch is not importable ({exc}); install a CUDA build of torch to test {FLASH_ATTN_4.package}"
        return Fa4Gate(False, why, versions=versions)
    found: dict = {"torch": torch.__version__, "versions": versions}
    if torch.version.cuda is None:
        return Fa4Gate(False, f"torch {torch.__version__} is a CPU build; a CUDA build of torch is needed", **found)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        why = f"no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda})"
        return Fa4Gate(False, why, **found)
    found["capability"] = tuple(torch.cuda.get_device_capability(0))
    found["device"] = torch.cuda.get_device_name(0)
    gate = judge(found)
    return replace(gate, notes=(*gate.notes, set_note(torch.__version__, torch.version.cuda))) if gate.usable else gate


def set_note(torch_version: str, cuda: str) -> str:
    """How this environment compares with the known-good set of its torch minor and CUDA (variants/), so that a
    passing run says which set it proves; the data file is read where the checkout is at hand."""
    minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    try:
        from packaging.version import Version  # noqa: PLC0415 (only here)

        from faforge.families.flash_attn_4.sets import load  # noqa: PLC0415 (yaml, packaging: only here)

        data = load()
        kgs = data.set_for(minor, cuda)
    except Exception as exc:  # no checkout, no yaml: a note, never a closed gate
        return f"the known-good sets were not read ({type(exc).__name__}: {exc})"
    if kgs is None:
        return f"no known-good set of {FLASH_ATTN_4.package} for torch {minor} and CUDA {cuda}"
    wanted = {FLASH_ATTN_4.package: kgs.version, **kgs.packages}
    found = installed_versions(tuple(wanted))

    def kept(name: str, want: str) -> bool:  # the set's pin policy: a floor-pinned package may be newer
        have = found[name]
        return have is not None and (Version(have) >= Version(want) if name in data.floor else have == want)

    differ = [
        f"{name} {found[name] or 'absent'} (set: {want})" for name, want in wanted.items() if not kept(name, want)
    ]
    if not differ:
        return f"the known-good set {kgs.id}, every pin kept"
    return f"the known-good set {kgs.id}, except: {', '.join(differ)}"


def judge(found: dict) -> Fa4Gate:
    """The verdict once torch and the device are known: arch, the import path's packages, whose files, import."""
    where = f"{found['device']} (sm_{found['capability'][0]}{found['capability'][1]})"
    if why := arch_verdict(found["capability"]):
        return Fa4Gate(False, f"{where}: {why}", **found)
    if absent := missing(found["versions"]):
        return Fa4Gate(
            False,
            f"{FLASH_ATTN_4.package}'s import path is incomplete beside torch {found['torch']}: {', '.join(absent)} "
            "not installed (on a GPU machine without a network: faforge.families.flash_attn_4.gpu_payload)",
            **found,
        )
    if foreign := foreign_copy(probe_file()):  # before importing: a mixed copy fails to import for another reason
        return Fa4Gate(False, foreign, **found)
    try:
        module = importlib.import_module(FLASH_ATTN_4.module)
    except Exception as exc:  # any import failure closes the gate; its text is the reason
        return Fa4Gate(False, f"`import {FLASH_ATTN_4.module}` fails: {type(exc).__name__}: {exc}", **found)
    version = found["versions"][FLASH_ATTN_4.package]
    notes = (
        f"{FLASH_ATTN_4.module}.__version__ says {getattr(module, '__version__', None)}; "
        f"{FLASH_ATTN_4.package}'s distribution metadata says {version}",
    )
    return Fa4Gate(True, f"{where}; {FLASH_ATTN_4.package} {version}", notes=notes, **found)
