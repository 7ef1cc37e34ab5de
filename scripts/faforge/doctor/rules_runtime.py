"""Doctor's rules about what the extension needs at run time: the CUDA runtime, the kernel library
and a GPU it has code for."""

from __future__ import annotations

from faforge.abi import classify
from faforge.doctor.binary import BinaryFacts
from faforge.doctor.facts import Gpu
from faforge.doctor.situation import ERROR, WARNING, Problem, Situation
from faforge.family import FLASH_ATTN
from faforge.gpu import compat
from faforge.matrix.kernels import KERNEL_LIBRARY, KERNEL_PACKAGE, kernel_build_differences


def _major(version: str | None) -> int | None:
    return int(version.split(".")[0]) if version and version.split(".")[0].isdigit() else None


def cuda_major_mismatch(s: Situation) -> Problem | None:
    torch_major = _major(s.torch_cuda)
    if torch_major is None or s.binary is None:
        return None
    built = [m for m in s.binary.cudart_majors if m != torch_major]
    source = "it needs " + ", ".join(f"libcudart.so.{m}" for m in built)
    if (
        not s.binary.cudart_majors
        and s.claim
        and (claimed := _major(s.claim.cuda)) is not None
        and claimed != torch_major
    ):
        built, source = [claimed], f"its {s.claim.source} says CUDA {s.claim.cuda} ({s.claim.text})"
    if not built:
        return None
    return Problem(
        "cuda-major-mismatch",
        ERROR,
        f"{FLASH_ATTN.package} was built for CUDA {built[0]} ({source}); your {s.torch_words} uses CUDA {s.torch_cuda}",
        evidence={"binary_cuda_major": built[0], "torch_cuda": s.torch_cuda},
    )


def libcudart_missing(s: Situation) -> Problem | None:
    torch_major = _major(s.torch_cuda)
    if s.binary is None or torch_major is None:
        return None
    missing = sorted(name for name in _unfound_libraries(s, s.binary) if name == f"libcudart.so.{torch_major}")
    if not missing:
        return None
    return Problem(
        "libcudart-missing",
        ERROR,
        f"{missing[0]} (the CUDA {torch_major} runtime that {FLASH_ATTN.package} links to) is not installed in this "
        "environment or on the system library path",
        evidence={"library": missing[0]},
    )


def _unfound_libraries(s: Situation, binary: BinaryFacts) -> set[str]:
    """Libraries of the extension that neither the loader model nor the import found; not those that
    are installed where the loader does not look (torch-import-failed names that layout)."""
    unfound = {u.name for u in binary.module.unverified_libraries}
    unfound |= {p.library for p in binary.module.problems if p.kind == classify.MISSING_LIBRARY and p.library}
    if s.facts.import_outcome.missing_library:
        unfound.add(s.facts.import_outcome.missing_library)
    return unfound - {p.library for p in s.misplaced()}


def kernel_library(s: Situation) -> Problem | None:
    """A split flash-attn (the split build) loads its kernels from libflash_attn_kernels.so, which only the
    exact libflash-attn-kernels build its conda record pins provides: another build holds kernels for
    another CUDA, arch list or Philox layout (torch <= 2.9 vs >= 2.10) behind the same file name."""
    if s.binary is None or not s.binary.needs_kernel_library:
        return None
    pin = s.kernel_pin
    installed = next((r for r in s.facts.conda or () if r.name == KERNEL_PACKAGE), None)
    evidence = {
        "library": KERNEL_LIBRARY,
        "required": str(pin) if pin else None,
        "installed": f"{installed.name} {installed.version} {installed.build}" if installed else None,
    }
    record = s.flash_attn.conda_record  # the record `pin` is read from
    if (
        pin is not None
        and record is not None
        and installed is not None
        and (installed.version, installed.build) != (pin.version, pin.build)
    ):
        differences = kernel_build_differences(pin.build, installed.build) or ["another build"]
        return Problem(
            "kernel-library-mismatch",
            ERROR,
            f"{FLASH_ATTN.package} {record.version} ({record.build}) requires exactly {pin}, but this environment has "
            f"{installed.name} {installed.version} ({installed.build}): {'; '.join(differences)}",
            (
                f"{KERNEL_LIBRARY} comes from {installed.name} "
                f"{installed.version} {installed.build} ({installed.channel_name})",
            ),
            evidence,
        )
    if s.facts.import_outcome.ok or not any(
        FLASH_ATTN.is_kernel_library(name) for name in _unfound_libraries(s, s.binary)
    ):
        return None
    if pin is not None and installed is None:
        why = f"its conda package {KERNEL_PACKAGE} is not installed ({FLASH_ATTN.package} requires {pin})"
    else:
        why = "it is neither in this environment's library directories nor on the system library path"
    return Problem(
        "kernel-library-missing",
        ERROR,
        f"{FLASH_ATTN.package}'s extension needs {KERNEL_LIBRARY} (its kernels, "
        f"package {KERNEL_PACKAGE}), which the loader cannot find: {why}",
        (f"`import {FLASH_ATTN.extension}` fails: {s.facts.import_outcome.error.message}",)
        if s.facts.import_outcome.error
        else (),
        evidence,
    )


def gpu_arch(s: Situation) -> list[Problem]:
    gpus = _gpus(s)
    if s.binary is None or not gpus:
        return []
    archs = s.binary.module.declared.gpu
    problems = []
    for gpu in gpus:
        if gpu.capability is None:
            continue
        if not archs:
            problems.append(
                Problem(
                    "gpu-arch-missing",
                    ERROR,
                    f"{FLASH_ATTN.package}'s binary holds no GPU code at all; your "
                    f"{gpu.name} (sm_{gpu.capability[0]}{gpu.capability[1]}) cannot run it",
                    evidence={"gpu": compat.gpu_name(gpu.capability), "sass": [], "ptx": []},
                )
            )
            continue
        verdict = compat.check(gpu.capability, archs.sass, archs.ptx)
        evidence = {"gpu": verdict.gpu, "sass": list(archs.sass), "ptx": list(archs.ptx)}
        if verdict.status == compat.NONE:
            problems.append(
                Problem(
                    "gpu-arch-missing",
                    ERROR,
                    f"{FLASH_ATTN.package} has no kernels for your {gpu.name} ({verdict.gpu}): {verdict.message}",
                    (verdict.hint,) if verdict.hint else (),
                    evidence,
                )
            )
        elif verdict.status == compat.JIT:
            problems.append(Problem("gpu-arch-jit", WARNING, f"{gpu.name}: {verdict.message}", (), evidence))
    return problems


def _gpus(s: Situation) -> list[Gpu]:
    """GPUs from nvidia-smi, else from torch; one per capability."""
    seen: dict[tuple[int, int] | str, Gpu] = {}
    for gpu in (*s.facts.gpus, *s.facts.torch.devices):
        key = gpu.capability or gpu.name
        seen.setdefault(key, gpu)
    return list(seen.values())


def no_gpu(s: Situation) -> Problem | None:
    if _gpus(s):
        return None
    return Problem(
        "no-gpu",
        WARNING,
        f"no NVIDIA GPU is visible here; {FLASH_ATTN.package} can be imported but not run",
        (
            f"nvidia-smi: {s.facts.nvidia_smi}",
            f"torch: {'no CUDA device' if s.facts.torch.imported else 'not importable'}",
        ),
    )
