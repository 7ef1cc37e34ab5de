"""Turn the facts about an environment into problems stated in plain words.

Each rule looks at one cause and returns at most one Problem. The import of
flash_attn_2_cuda is the ground truth: when it succeeds, no symbol-level
problem is reported, whatever a static check might suspect; when it fails and
no rule explains why, the raw error is reported as `import-failed`.
Problems are listed root cause first (a wrong torch before the symbols it breaks).
"""

from __future__ import annotations

from faforge.doctor.rules_extension import (
    cxx11_abi_mismatch,
    flash_attn_missing,
    glibc_too_old,
    layout_break,
    libstdcxx_too_old,
    python_tag_mismatch,
    signature_drift,
    wrong_architecture,
)
from faforge.doctor.rules_runtime import cuda_major_mismatch, gpu_arch, kernel_library, libcudart_missing, no_gpu
from faforge.doctor.rules_torch import (
    cpu_only_torch,
    mixed_channels,
    mixed_conda_pip_torch,
    torch_import_failed,
    torch_missing,
)
from faforge.doctor.situation import ERROR, PACKAGE_MISSING, WARNING, Problem, Situation
from faforge.family import FLASH_ATTN

# Every kind doctor reports, in the order it lists them (root causes first).
KINDS = (
    "torch-missing",
    "torch-import-failed",
    "mixed-channels",
    "mixed-conda-pip-torch",
    "cpu-only-torch",
    "python-tag-mismatch",
    "wrong-architecture",
    "glibc-too-old",
    "libstdcxx-too-old",
    "cxx11-abi-mismatch",
    "signature-drift",
    "layout-break",
    "cuda-major-mismatch",
    "libcudart-missing",
    "kernel-library-missing",
    "kernel-library-mismatch",
    PACKAGE_MISSING,
    "gpu-arch-missing",
    "import-failed",
    "gpu-arch-jit",
    "no-gpu",
    "unreadable-metadata",
)


def import_failed(s: Situation, found: list[Problem]) -> Problem | None:
    outcome = s.facts.import_outcome
    if outcome.ok or not s.facts.extension or any(p.severity == ERROR for p in found):
        return None
    if outcome.crashed:
        return Problem(
            "import-failed", ERROR, f"`import {FLASH_ATTN.extension}` crashed the interpreter ({outcome.crashed})"
        )
    error = outcome.error
    detail = (s.binary_error,) if s.binary_error else ()
    why = f": {error.type}: {error.message}" if error else ""  # the probe's line may name no error
    return Problem("import-failed", ERROR, f"`import {FLASH_ATTN.extension}` fails{why}", detail)


def unreadable_metadata(s: Situation) -> Problem | None:
    """Corrupt install records do not stop Python from importing, but the facts read from them are missing."""
    unreadable = s.facts.unreadable_metadata
    if not unreadable:
        return None
    return Problem(
        "unreadable-metadata",
        WARNING,
        f"{len(unreadable)} install record(s) could not be read, so how torch or {FLASH_ATTN.package} was installed "
        "may be unknown; reinstall the package that owns each file",
        tuple(f"{u.path}: {u.reason}" for u in unreadable),
    )


RULES = (
    torch_missing,
    torch_import_failed,
    mixed_channels,
    mixed_conda_pip_torch,
    cpu_only_torch,
    python_tag_mismatch,
    wrong_architecture,
    glibc_too_old,
    libstdcxx_too_old,
    cxx11_abi_mismatch,
    signature_drift,
    layout_break,
    cuda_major_mismatch,
    libcudart_missing,
    kernel_library,
    flash_attn_missing,
    unreadable_metadata,
)


def diagnose(s: Situation) -> list[Problem]:
    found = [p for rule in RULES if (p := rule(s)) is not None]
    found += gpu_arch(s)
    if (p := import_failed(s, found)) is not None:
        found.append(p)
    if (p := no_gpu(s)) is not None:
        found.append(p)
    return sorted(found, key=lambda p: KINDS.index(p.kind))
