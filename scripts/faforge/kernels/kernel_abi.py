"""Which torch minors may use the shared kernel library: the verdicts in variants/kernel-abi.yaml.

The kernel library is compiled once against the torch shim; a torch minor's glue may link against it
only if that torch lays out Flash_fwd_params / Flash_bwd_params (through at::PhiloxCudaState) exactly
as the shim does. tests/kernels/test_params_layout.py measures every matrix torch and fails when a verdict
here is missing or disagrees with the measurement (faforge.kernels.params_layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from faforge import paths
from faforge.datafile import load_yaml
from faforge.errors import DataError
from faforge.family import FLASH_ATTN
from faforge.versions import is_version, minor_of

if TYPE_CHECKING:  # params_layout reads ELF files through pyelftools, whose import every `faforge matrix` would pay
    from faforge.kernels.params_layout import Layout

SHARED = "shared"  # links against libflash-attn-kernels (compiled against the shim)
OWN_BUILD = "own-build"  # differs from the default shim: its glue needs a library built with --philox-offset-bits 32
VERDICTS = (SHARED, OWN_BUILD)
SIZED_TYPES = ("at::PhiloxCudaState", "Flash_fwd_params", "Flash_bwd_params")
# offset_intragraph_'s type -> the kernel library that serves it: the shim as it is (uint64_t, torch >= 2.10)
# or built with --philox-offset-bits 32 (uint32_t). The width is a dimension of the kernel key
# (faforge.matrix.kernels) and the recipe's variant key `philox_offset_bits`.
PHILOX_OFFSET_BITS = {"uint32_t": 32, "uint64_t": 64}
VERDICT_OF_BITS = {64: SHARED, 32: OWN_BUILD}
KERNEL_ABI_FILE = "variants/kernel-abi.yaml"


@dataclass(frozen=True)
class Sizes:
    """sizeof of the three types the glue and the library exchange."""

    philox_cuda_state: int
    flash_fwd_params: int
    flash_bwd_params: int

    @classmethod
    def of(cls, layout: Layout) -> Sizes:
        return cls(*(layout.sizes[t][0] for t in SIZED_TYPES))


@dataclass(frozen=True)
class Verdict:
    minor: str
    torch: str  # the version whose headers were measured
    wheel: str  # the PyPI wheel they were read from
    sha256: str
    offset_intragraph: str  # the C type of PhiloxCudaState::offset_intragraph_ there
    sizes: Sizes
    verdict: str
    reason: str
    source: str | None = None  # wheel URL#member, for rows `faforge bump` measured (faforge.kernels.measure_abi)

    @property
    def philox_offset_bits(self) -> int:
        return PHILOX_OFFSET_BITS[self.offset_intragraph]


def _sizes(path: Path, key: str, raw: object) -> Sizes:
    names = [f.name for f in Sizes.__dataclass_fields__.values()]
    if not isinstance(raw, dict) or sorted(raw) != sorted(names) or not all(isinstance(raw[n], int) for n in names):
        raise DataError(path, key, f"expected integer sizes for exactly {', '.join(names)}, got {raw!r}")
    return Sizes(**raw)


def _verdict(path: Path, index: int, raw: object) -> Verdict:
    key = f"torch[{index}]"
    fields = ("minor", "torch", "wheel", "sha256", "offset_intragraph", "sizes", "verdict", "reason")
    if not isinstance(raw, dict) or sorted(set(raw) - {"source"}) != sorted(fields):
        raise DataError(
            path,
            key,
            f"expected the keys {', '.join(fields)} (and source), "
            f"got {sorted(raw) if isinstance(raw, dict) else raw!r}",
        )
    if not is_version(str(raw["torch"])) or minor_of(str(raw["torch"])) != str(raw["minor"]):
        raise DataError(path, f"{key}.torch", f"{raw['torch']!r} is not a version of torch minor {raw['minor']!r}")
    if raw["offset_intragraph"] not in PHILOX_OFFSET_BITS:
        raise DataError(
            path,
            f"{key}.offset_intragraph",
            f"{raw['offset_intragraph']!r} is not one of {', '.join(PHILOX_OFFSET_BITS)}",
            hint=f"only these two widths have a kernel library ({FLASH_ATTN.build_script} --philox-offset-bits 32|64)",
        )
    if raw["verdict"] not in VERDICTS:
        raise DataError(path, f"{key}.verdict", f"{raw['verdict']!r} is not one of {', '.join(VERDICTS)}")
    expected = VERDICT_OF_BITS[PHILOX_OFFSET_BITS[raw["offset_intragraph"]]]
    if raw["verdict"] != expected:
        raise DataError(
            path,
            f"{key}.verdict",
            f"{raw['verdict']!r} with offset_intragraph {raw['offset_intragraph']}: the library "
            f"of that width is the {expected!r} one, and no library has another layout",
            hint="measure again (tests/kernels/test_params_layout.py); a "
            "torch whose layout neither library has must be refused",
        )
    return Verdict(
        str(raw["minor"]),
        str(raw["torch"]),
        raw["wheel"],
        raw["sha256"],
        raw["offset_intragraph"],
        _sizes(path, f"{key}.sizes", raw["sizes"]),
        raw["verdict"],
        raw["reason"],
        raw.get("source"),
    )


def dump_row(verdict: Verdict) -> str:
    """The row as variants/kernel-abi.yaml spells it (appended by `faforge bump --write`)."""
    sizes = ", ".join(f"{name}: {value}" for name, value in vars(verdict.sizes).items())
    return (
        f"- minor: '{verdict.minor}'\n  torch: {verdict.torch}\n  "
        f"wheel: {verdict.wheel}\n  sha256: '{verdict.sha256}'\n"
        + (f"  source: {verdict.source}\n" if verdict.source else "")
        + f"  offset_intragraph: {verdict.offset_intragraph}\n  sizes: {{{sizes}}}\n  verdict: {verdict.verdict}\n"
        f"  reason: {verdict.reason}\n"
    )


def load_kernel_abi(path: Path | None = None) -> dict[str, Verdict]:
    """torch minor -> its verdict; every entry checked (file, key, value named on error)."""
    path = path or paths.repo_root() / KERNEL_ABI_FILE
    raw = load_yaml(path)
    if not isinstance(raw, dict) or raw.get("schema") != 1 or not isinstance(raw.get("torch"), list):
        raise DataError(path, "(file)", "expected schema: 1 and a list under torch:")
    verdicts = {}
    for index, row in enumerate(raw["torch"]):
        verdict = _verdict(path, index, row)
        if verdict.minor in verdicts:
            raise DataError(path, f"torch[{index}].minor", f"torch {verdict.minor} has a second verdict")
        verdicts[verdict.minor] = verdict
    return verdicts


@dataclass(frozen=True)
class PhiloxWidths:
    """torch minor -> the Philox offset width of its kernel library, as variants/kernel-abi.yaml records it."""

    path: Path
    by_minor: dict[str, int]

    def of(self, torch_minor: str) -> int:
        if torch_minor not in self.by_minor:
            raise DataError(
                self.path,
                "torch",
                f"no row for torch minor {torch_minor}, which variants/releases.yaml gives the matrix",
                hint="`faforge bump --write` measures the row from that torch's PyPI wheel and adds it "
                f"(or add `- minor: '{torch_minor}'` by hand: offset_intragraph as its "
                "ATen/cuda/detail/PhiloxCudaStateRaw.cuh declares it, sizes and verdict)",
            )
        return self.by_minor[torch_minor]


def load_philox_widths(path: Path | None = None) -> PhiloxWidths:
    path = path or paths.repo_root() / KERNEL_ABI_FILE
    return PhiloxWidths(path, {minor: verdict.philox_offset_bits for minor, verdict in load_kernel_abi(path).items()})
