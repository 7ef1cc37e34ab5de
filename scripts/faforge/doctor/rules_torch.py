"""Doctor's rules about torch itself: missing, not importable, mixed channels or installers, CPU-only."""

from __future__ import annotations

from faforge.abi import classify
from faforge.doctor.facts import CondaRecord
from faforge.doctor.situation import ERROR, Problem, Situation
from faforge.family import FLASH_ATTN

TORCH_STACK = ("pytorch", "libtorch", "pytorch-cuda", "pytorch-mutex", "torchvision", "torchaudio")


def torch_missing(s: Situation) -> Problem | None:
    if s.torch.installed or s.facts.torch.imported:
        return None
    return Problem(
        "torch-missing",
        ERROR,
        f"torch is not installed in {s.facts.python.prefix}; {FLASH_ATTN.package} needs a CUDA build of torch",
    )


def torch_import_failed(s: Situation) -> Problem | None:
    if not s.torch.installed or s.facts.torch.imported:
        return None
    error = s.facts.torch.error
    details = [f"{error.type}: {error.message}"] if error else []
    message = f"torch is installed ({s.torch.how}) but `import torch` fails"
    misplaced = next((p for p in s.misplaced() if error and f"{p.library}: " in error.message), None)
    if misplaced is not None:  # the library is there; a folder linked as a whole hides it from the loader
        link = misplaced.misplaced.link
        message += (
            f": the loader does not find {misplaced.library} because {link} is a symlink to a folder elsewhere"
            if link
            else f": the loader does not find {misplaced.library} because a folder is reached through a symlink"
        )
        details.append(misplaced.detail)
    return Problem("torch-import-failed", ERROR, message, tuple(details))


def mixed_channels(s: Situation) -> Problem | None:
    records = [r for r in s.facts.conda or () if r.name in TORCH_STACK]
    worlds: dict[str, list[CondaRecord]] = {}
    for record in records:
        worlds.setdefault(record.world, []).append(record)
    if len(worlds) < 2:
        return None
    listed = {
        world: ", ".join(f"{r.name} {r.version} ({r.build}) from {r.channel_name}" for r in rs)
        for world, rs in worlds.items()
    }
    return Problem(
        "mixed-channels",
        ERROR,
        "torch packages come from both the legacy `pytorch` channel and conda-forge; the two worlds build torch "
        "differently (pre-C++11 vs C++11 ABI, bundled vs separate libtorch) and cannot be mixed in one environment",
        tuple(f"{world}: {text}" for world, text in sorted(listed.items())),
        {"worlds": {world: [r.name for r in rs] for world, rs in sorted(worlds.items())}},
    )


def mixed_conda_pip_torch(s: Situation) -> Problem | None:
    record = s.torch.conda_record or next((r for r in s.facts.conda or () if r.name in ("pytorch", "libtorch")), None)
    if record is None:
        return None
    dist = s.torch.distribution
    if dist is None:  # no .dist-info of torch: no pip copy to mix
        return None
    shadowed = list(s.torch.others)
    if s.torch.how == "pip":
        message = (
            f"torch {dist.version} from pip shadows conda's {record.name} {record.version} ({record.build}) in "
            f"this conda environment; their files are now mixed in {dist.site}"
        )
    elif shadowed:
        message = (
            f"this environment holds {len(shadowed) + 1} copies of torch: conda's "
            f"{record.version} and pip's {', '.join(d.version or '?' for d in shadowed)}"
        )
    else:
        return None
    details = [f"active: {dist.path} (installer: {dist.installer or 'unknown'})"] + [
        f"also: {d.path}" for d in shadowed
    ]
    return Problem(
        "mixed-conda-pip-torch",
        ERROR,
        message,
        tuple(details),
        {"conda": f"{record.name} {record.version} {record.build}", "pip": dist.version if dist else None},
    )


def cpu_only_torch(s: Situation) -> Problem | None:
    rt = s.facts.torch
    if not rt.imported or rt.cuda is not None:
        return None
    details = []
    missing = s.gate_problems(classify.MISSING_LIBRARY)
    if s.facts.import_outcome.missing_library:
        details.append(
            f"that is why {FLASH_ATTN.extension} cannot load: {s.facts.import_outcome.missing_library} is not there"
        )
    elif missing:
        details.append(f"{FLASH_ATTN.extension} needs {missing[0].library}, which a CPU torch does not ship")
    return Problem(
        "cpu-only-torch",
        ERROR,
        f"torch {rt.version} is a CPU-only build (torch.version.cuda "
        f"is None); {FLASH_ATTN.package} needs a CUDA build of torch",
        tuple(details),
    )
