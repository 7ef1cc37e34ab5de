"""Can the installed flash-attn-3 be tested on this GPU? The FA3 counterpart of faforge.gpu.gate.

The package declares what it contains in flash_attn_config.py (upstream's generated module; our build
adds its GPU archs and TUs), read here without importing anything of FA3. Checks, in the order a person
debugs: torch, a CUDA torch, a device, flash_attn_3's extension, its declaration, then the binary:
its GPU code against the declaration and the device (faforge.gpu.compat), and a registered kernel
for every declared TU (faforge.families.flash_attn_3.gpu_kernels). FA3 runs on sm_90 (sm_90a code) and on sm_80-class
GPUs where the Ampere fallback is built; any other GPU closes the gate: exit 3, never 0.
A binary lacking what it declares is a defect: the suite fails. Standard library at module level.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

from faforge.errors import FaforgeError
from faforge.families.flash_attn_3.gpu_kernels import tus_in_binary
from faforge.family import FLASH_ATTN, FLASH_ATTN_3
from faforge.gpu.compat import JIT, check
from faforge.gpu.gate import read_embedded_archs
from faforge.untrusted import read_text

# Head dims FA3 compiles (hopper/setup.py's HDIM64..HDIM256 switches).
HEAD_DIMS = (64, 96, 128, 192, 256)


@dataclass(frozen=True)
class Fa3Gate:
    """What was found and whether the FA3 suite can run; `reason` is printed verbatim on a skip."""

    usable: bool
    reason: str
    torch: str | None = None
    device: str | None = None
    capability: tuple[int, int] | None = None
    extension: str | None = None
    declared: dict = field(default_factory=dict)  # flash_attn_config.CONFIG
    defects: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        data = asdict(self)
        data["capability"] = list(self.capability) if self.capability else None
        data["defects"], data["notes"] = list(self.defects), list(self.notes)
        return data

    @property
    def disabled(self) -> frozenset[str]:
        """The FLASH_ATTENTION_DISABLE_* switches the build set: 'SPLIT', 'HDIM64', 'SM8x', ..."""
        flags = self.declared.get("build_flags", {})
        return frozenset(name.split("DISABLE_", 1)[1] for name, on in flags.items() if on and "DISABLE_" in name)

    def enabled(self, feature: str) -> bool:
        return feature not in self.disabled

    @property
    def head_dims(self) -> tuple[int, ...]:
        return tuple(h for h in HEAD_DIMS if self.enabled(f"HDIM{h}"))

    @property
    def dtypes(self) -> tuple[str, ...]:
        return ("bf16", *(["fp16"] if self.enabled("FP16") else []))

    @property
    def tus(self) -> tuple[str, ...]:
        return tuple(self.declared.get("tus", ()))


# What a declaration must hold, and of which type (fa3_backend.config_module writes it).
DECLARED_FIELDS = {"build_flags": dict, "gpu_archs": list, "tus": list}


def read_declaration(path: Path) -> dict:
    """CONFIG of a generated flash_attn_config.py, as a literal: the file is data the package brought,
    read bounded (faforge.untrusted: no FIFO, no device, at most 16 MiB), never run, its shape checked.
    ValueError (or FaforgeError from the read) names what is wrong."""
    tree = ast.parse(read_text(path, "data", hint="reinstall the package"), str(path))
    value = next(
        (
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CONFIG" for t in node.targets)
        ),
        None,
    )
    if value is None:
        raise ValueError(f"{path}: no CONFIG = {{...}} literal")
    try:
        config = ast.literal_eval(value)
    except ValueError:
        raise ValueError(f"{path}: unreadable declaration (CONFIG is not a literal)") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: CONFIG is a {type(config).__name__}, not a dict")
    wrong = [
        name
        for name, kind in DECLARED_FIELDS.items()
        if not isinstance(config.get(name), kind)
        or (kind is list and not all(isinstance(item, str) for item in config[name]))
    ]
    if wrong:
        raise ValueError(
            f"{path}: CONFIG's {', '.join(wrong)} missing or not "
            f"{', '.join(DECLARED_FIELDS[w].__name__ for w in wrong)}"
        )
    return config


def _origin(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


@lru_cache(maxsize=1)
def evaluate() -> Fa3Gate:
    """Run the checks once per process (the suite's modules and the CLI all ask)."""
    try:
        import torch  # noqa: PLC0415  (lazy: the CLI must start without torch)
    except ImportError as exc:
        return Fa3Gate(
            False,
            f"torch is not importable ({exc}); install a CUDA build of torch >= 2.9 to test {FLASH_ATTN_3.package}",
        )
    found: dict = {"torch": torch.__version__}
    if torch.version.cuda is None:
        return Fa3Gate(False, f"torch {torch.__version__} is a CPU build; a CUDA build of torch is needed", **found)
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return Fa3Gate(
            False, f"no CUDA device visible to torch {torch.__version__} (CUDA {torch.version.cuda})", **found
        )
    found["capability"] = tuple(torch.cuda.get_device_capability(0))
    found["device"] = torch.cuda.get_device_name(0)
    extension = _origin(FLASH_ATTN_3.extension)
    if extension is None:
        return Fa3Gate(
            False,
            f"{FLASH_ATTN_3.module} is not installed (no "
            f"{FLASH_ATTN_3.extension} module) beside torch {torch.__version__}",
            **found,
        )
    found["extension"] = str(extension)
    return judge(found, _origin(FLASH_ATTN_3.config_module))


def judge(found: dict, config: Path | None) -> Fa3Gate:
    """The verdict once device and extension are known: declaration, binary, GPU."""
    where = f"{found['device']} (sm_{found['capability'][0]}{found['capability'][1]})"
    if config is None:
        return Fa3Gate(
            True,
            where,
            defects=(
                f"no {FLASH_ATTN_3.config_module}.py beside {FLASH_ATTN_3.module}: "
                "the package does not declare what it contains",
            ),
            **found,
        )
    try:
        found["declared"] = read_declaration(config)
    except FaforgeError as exc:
        return Fa3Gate(True, where, defects=(exc.message,), **found)
    except ValueError as exc:
        return Fa3Gate(True, where, defects=(str(exc),), **found)
    except (SyntaxError, RecursionError, MemoryError) as exc:  # not Python, or nested past the parser's limits
        return Fa3Gate(True, where, defects=(f"{config}: unreadable declaration ({type(exc).__name__})",), **found)
    extension = Path(found["extension"])
    archs, unreadable = embedded_archs(extension)
    if unreadable:  # not a shared library at all: the package is broken, whatever this GPU is
        return Fa3Gate(True, where, defects=(unreadable,), **found)
    defects, notes = binary_defects(Fa3Gate(True, where, **found), extension, archs), []
    if archs is None:
        return Fa3Gate(
            True,
            f"{where}; arch check not done",
            defects=tuple(defects),
            notes=("embedded SASS/PTX not read (faforge.abi.fatbin unavailable)",),
            **found,
        )
    verdict = check(found["capability"], *archs)
    if not verdict.can_run:
        return Fa3Gate(
            False,
            f"{verdict.message}: {FLASH_ATTN_3.package} serves sm_90 (Hopper) and, where built, sm_80-class GPUs "
            f"(other GPUs: {FLASH_ATTN.title} or torch's SDPA)",
            defects=tuple(defects),
            **found,
        )
    if verdict.status == JIT:
        notes.append(verdict.message)
    return Fa3Gate(True, f"{where}; {verdict.message}", defects=tuple(defects), notes=tuple(notes), **found)


def embedded_archs(extension: Path) -> tuple[tuple[tuple[str, ...], tuple[str, ...]] | None, str | None]:
    """((SASS, PTX) or None where faforge.abi is not importable, why the file is no shared library or None)."""
    try:
        from faforge.abi.elf_file import ElfError  # noqa: PLC0415  (needs pyelftools; may be absent)
    except ImportError:
        return None, None
    try:
        return read_embedded_archs(extension), None
    except ElfError as exc:
        return None, exc.message


def binary_defects(gate: Fa3Gate, extension: Path, archs: tuple[tuple[str, ...], tuple[str, ...]] | None) -> list[str]:
    """What the package declares but its binary (`extension`) lacks: a GPU arch, or any kernel of a declared TU."""
    defects: list[str] = []
    declared_archs = tuple(gate.declared.get("gpu_archs", ()))
    if archs is not None and declared_archs and set(declared_archs) - set(archs[0]):
        defects.append(
            f"declares GPU code {', '.join(declared_archs)} but {extension.name} holds {', '.join(archs[0]) or 'none'}"
        )
    by_tu = tus_in_binary(extension, gate.tus)
    empty = [tu for tu, kernels in (by_tu or {}).items() if not kernels]
    if by_tu is None:
        defects.append(
            f"the kernels of {extension.name} could not be named here "
            "(no libstdc++ to demangle them); declared TUs not checked"
        )
    elif empty:
        defects.append(f"declares {len(empty)} TUs that {extension.name} registers no kernel of, e.g. {empty[0]}")
    return defects
