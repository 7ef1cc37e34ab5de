"""Turn the facts about an environment into problems stated in plain words.

Each rule looks at one cause and returns at most one Problem. The import of
flash_attn_2_cuda is the ground truth: when it succeeds, no symbol-level
problem is reported, whatever a static check might suspect; when it fails and
no rule explains why, the raw error is reported as `import-failed`.
Problems are listed root cause first (a wrong torch before the symbols it breaks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from faforge.abi import classify
from faforge.abi.demangle import demangle
from faforge.doctor.binary import BinaryFacts
from faforge.doctor.facts import EnvFacts, Gpu
from faforge.doctor.installs import Claim, Install
from faforge.doctor.torch_symbols import built_for_one
from faforge.gpu import compat
from faforge.matrix.kernels import KERNEL_LIBRARY, KERNEL_PACKAGE, KernelPin, kernel_build_differences, kernel_pin

ERROR, WARNING = "error", "warning"
# Every kind doctor reports, in the order it lists them (root causes first).
KINDS = (
    "torch-missing", "torch-import-failed", "mixed-channels", "mixed-conda-pip-torch", "cpu-only-torch",
    "python-tag-mismatch", "wrong-architecture", "glibc-too-old", "libstdcxx-too-old", "cxx11-abi-mismatch",
    "signature-drift", "cuda-major-mismatch", "libcudart-missing", "kernel-library-missing", "kernel-library-mismatch",
    "flash-attn-missing", "gpu-arch-missing",
    "import-failed", "gpu-arch-jit", "no-gpu", "unreadable-metadata",
)
ABI_WORDS = {0: "the pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0)", 1: "the C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1)"}
# How many of a signature drift's symbols its details spell out; the evidence lists them all.
DETAILED_SYMBOLS = 5
TORCH_STACK = ("pytorch", "libtorch", "pytorch-cuda", "pytorch-mutex", "torchvision", "torchaudio")


@dataclass(frozen=True)
class Problem:
    kind: str
    severity: str
    message: str  # one sentence a user can act on
    details: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Situation:
    """Everything the rules look at, gathered once."""

    facts: EnvFacts
    torch: Install
    flash_attn: Install
    claim: Claim | None
    binary: BinaryFacts | None
    binary_error: str | None  # why the extension file could not be read

    @property
    def torch_version(self) -> str | None:
        return self.facts.torch.version or self.torch.version

    @property
    def torch_words(self) -> str:
        return f"torch {self.torch_version}" if self.torch_version else "torch"

    @property
    def torch_cuda(self) -> str | None:
        return self.facts.torch.cuda or (self.binary.verdict.torch.cuda if self.binary else None)

    @property
    def torch_abi(self) -> int | None:
        rt = self.facts.torch.cxx11_abi
        return rt if rt is not None else (self.binary.verdict.torch.cxx11_abi if self.binary else None)

    @property
    def import_failed(self) -> bool:
        outcome = self.facts.import_outcome
        return not outcome.ok and (self.flash_attn.installed or bool(self.facts.extension_files))

    @property
    def kernel_pin(self) -> KernelPin | None:
        """The exact libflash-attn-kernels build the installed flash-attn's conda record requires."""
        record = self.flash_attn.conda_record
        return kernel_pin(record.depends) if record is not None else None

    def gate_problems(self, *kinds: str) -> list:
        if self.binary is None or not self.import_failed:
            return []
        return [p for p in self.binary.module.problems if p.kind in kinds]


def _major(version: str | None) -> int | None:
    return int(version.split(".")[0]) if version and version.split(".")[0].isdigit() else None


# -- torch ---------------------------------------------------------------------------------------


def torch_missing(s: Situation) -> Problem | None:
    if s.torch.installed or s.facts.torch.imported:
        return None
    return Problem("torch-missing", ERROR, f"torch is not installed in {s.facts.python.prefix}; flash-attn needs a CUDA build of torch")


def torch_import_failed(s: Situation) -> Problem | None:
    if not s.torch.installed or s.facts.torch.imported:
        return None
    error = s.facts.torch.error
    details = [f"{error.type}: {error.message}"] if error else []
    message = f"torch is installed ({s.torch.how}) but `import torch` fails"
    misplaced = next((p for p in _misplaced(s) if error and f"{p.library}: " in error.message), None)
    if misplaced is not None:  # the library is there; a folder linked as a whole hides it from the loader
        link = misplaced.misplaced.link
        message += (f": the loader does not find {misplaced.library} because {link} is a symlink to a folder elsewhere"
                    if link else f": the loader does not find {misplaced.library} because a folder is reached through a symlink")
        details.append(misplaced.detail)
    return Problem("torch-import-failed", ERROR, message, tuple(details))


def _misplaced(s: Situation) -> list:
    """The gate's missing libraries that are installed where a lexical `..` leads, not where the loader looks."""
    return [p for p in s.gate_problems(classify.MISSING_LIBRARY) if p.misplaced is not None]


def mixed_channels(s: Situation) -> Problem | None:
    records = [r for r in s.facts.conda or () if r.name in TORCH_STACK]
    worlds = {}
    for record in records:
        worlds.setdefault(record.world, []).append(record)
    if len(worlds) < 2:
        return None
    listed = {world: ", ".join(f"{r.name} {r.version} ({r.build}) from {r.channel_name}" for r in rs) for world, rs in worlds.items()}
    return Problem(
        "mixed-channels", ERROR,
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
    shadowed = list(s.torch.others)
    if s.torch.how == "pip":
        message = (f"torch {dist.version} from pip shadows conda's {record.name} {record.version} ({record.build}) in "
                   f"this conda environment; their files are now mixed in {dist.site}")
    elif shadowed:
        message = f"this environment holds {len(shadowed) + 1} copies of torch: conda's {record.version} and pip's {', '.join(d.version or '?' for d in shadowed)}"
    else:
        return None
    details = [f"active: {dist.path} (installer: {dist.installer or 'unknown'})"] + [f"also: {d.path}" for d in shadowed]
    return Problem("mixed-conda-pip-torch", ERROR, message, tuple(details),
                   {"conda": f"{record.name} {record.version} {record.build}", "pip": dist.version if dist else None})


def cpu_only_torch(s: Situation) -> Problem | None:
    rt = s.facts.torch
    if not rt.imported or rt.cuda is not None:
        return None
    details = []
    missing = s.gate_problems(classify.MISSING_LIBRARY)
    if s.facts.import_outcome.missing_library:
        details.append(f"that is why flash_attn_2_cuda cannot load: {s.facts.import_outcome.missing_library} is not there")
    elif missing:
        details.append(f"flash_attn_2_cuda needs {missing[0].library}, which a CPU torch does not ship")
    return Problem("cpu-only-torch", ERROR,
                   f"torch {rt.version} is a CPU-only build (torch.version.cuda is None); flash-attn needs a CUDA build of torch",
                   tuple(details))


# -- the extension file --------------------------------------------------------------------------


def flash_attn_missing(s: Situation) -> Problem | None:
    if s.facts.extension or s.facts.extension_files:
        return None
    if s.flash_attn.installed:
        return Problem("flash-attn-missing", ERROR,
                       f"flash-attn {s.flash_attn.version} is installed ({s.flash_attn.how}) but its extension "
                       "flash_attn_2_cuda*.so is not on sys.path; the install is incomplete")
    return Problem("flash-attn-missing", ERROR, "flash-attn is not installed in this environment")


def python_tag_mismatch(s: Situation) -> Problem | None:
    py = s.facts.python
    wanted = (py.ext_suffix or "").removesuffix(".so").lstrip(".")
    if s.facts.extension is None and s.facts.extension_files:
        names = ", ".join(f.rsplit("/", 1)[-1] for f in s.facts.extension_files)
        return Problem("python-tag-mismatch", ERROR,
                       f"flash-attn's extension is built for another Python ({names}); this interpreter is "
                       f"{py.implementation} {py.version} and loads only *.{wanted}.so",
                       evidence={"files": list(s.facts.extension_files), "expected_tag": wanted})
    if s.claim and s.claim.python and s.claim.python != py.minor:
        return Problem("python-tag-mismatch", ERROR,
                       f"flash-attn's {s.claim.source} says Python {s.claim.python} ({s.claim.text}); this interpreter is Python {py.version}")
    return None


def wrong_architecture(s: Situation) -> Problem | None:
    found = s.gate_problems(classify.WRONG_ARCHITECTURE)
    if not found:
        return None
    return Problem("wrong-architecture", ERROR,
                   f"flash-attn's binary is built for {s.binary.module.declared.machine}; this machine is {s.facts.system.machine}",
                   tuple(p.detail for p in found))


def _version_problems(s: Situation, prefixes: tuple[str, ...]) -> list[tuple[str, str]]:
    """(required version, detail) for runtime-library versions the loader or the gate could not satisfy."""
    found = [(p.symbol, p.detail) for p in s.gate_problems(classify.GLIBC_TOO_NEW)]
    missing = s.facts.import_outcome.missing_version
    if missing and missing not in {v for v, _ in found}:
        found.append((missing, s.facts.import_outcome.error.message))
    return [(v, d) for v, d in found if (parsed := classify.parse_version(v)) and parsed[0] in prefixes]


def glibc_too_old(s: Situation) -> Problem | None:
    found = _version_problems(s, ("GLIBC",))
    if not found:
        return None
    newest = max((v for v, _ in found), key=lambda v: classify.parse_version(v)[1])
    return Problem("glibc-too-old", ERROR,
                   f"flash-attn's binary needs glibc {newest.split('_', 1)[1]} ({newest}); this system has glibc {s.facts.system.glibc}",
                   tuple(d for _, d in found), {"required": newest, "system": s.facts.system.glibc})


def libstdcxx_too_old(s: Situation) -> Problem | None:
    found = _version_problems(s, ("GLIBCXX", "CXXABI", "GCC"))
    if not found:
        return None
    return Problem("libstdcxx-too-old", ERROR,
                   f"flash-attn's binary needs a newer C++ runtime than the one loaded here ({', '.join(v for v, _ in found)})",
                   tuple(d for _, d in found))


def cxx11_abi_mismatch(s: Situation) -> Problem | None:
    if s.binary is None or s.facts.import_outcome.ok:
        return None
    mine = s.binary.module.declared.cxx11_abi
    # Only a torch that imported says its ABI; a static guess about a broken torch is no cause (issue 12).
    theirs = s.torch_abi if s.facts.torch.imported else None
    gate = s.gate_problems(classify.ABI_MISMATCH)
    symbol = s.facts.import_outcome.undefined_symbol
    if not gate and (mine is None or theirs is None or mine == theirs):
        return None
    if mine is None and symbol:
        mine = classify.abi_of_name(symbol)
    details = [f"undefined symbol: {symbol}"] if symbol else []
    details += [f"{p.demangled or p.symbol}: {p.detail}" for p in gate[:3]]
    if s.claim and s.claim.cxx11_abi is not None and mine is not None and s.claim.cxx11_abi != mine:
        details.append(f"its {s.claim.source} ({s.claim.text}) claims cxx11abi {'TRUE' if s.claim.cxx11_abi else 'FALSE'}, "
                       "but the binary says otherwise (upstream's FLASH_ATTENTION_FORCE_CXX11_ABI=FALSE did not force ABI 0)")
    return Problem("cxx11-abi-mismatch", ERROR,
                   f"flash-attn was built with {ABI_WORDS.get(mine, 'another C++ ABI')}; "
                   f"your {s.torch_words} uses {ABI_WORDS.get(theirs, 'the other one')}",
                   tuple(details), {"binary_cxx11_abi": mine, "torch_cxx11_abi": theirs})


def signature_drift(s: Situation) -> Problem | None:
    """Built against another torch. The stated range is the cause only when it excludes the user's
    torch; a range that contains it is never called a mismatch (issue 12), and the symbol the import
    failed on leads."""
    if s.binary is None or not s.import_failed:
        return None
    symbol = s.facts.import_outcome.undefined_symbol
    gate = sorted(s.gate_problems(classify.SIGNATURE_DRIFT, classify.MISSING_SYMBOL), key=lambda p: p.symbol != symbol)
    built = s.binary.built_for
    in_table = symbol is not None and any(e.symbol == symbol for e in built.evidence)
    if not gate and not in_table:
        return None
    torch_release = s.torch_version
    in_range = built.known and bool(torch_release) and built.covers(torch_release)
    if in_range and not gate:
        return None
    lacking = [e for e in built.evidence if torch_release and not built_for_one(e).covers(torch_release)]
    lacking.sort(key=lambda e: e.symbol != symbol)
    stated = built.known and built.consistent and bool(lacking)
    by_gate = {p.symbol: p for p in gate}
    signatures = {e.symbol: e.signature for e in lacking}
    # Every symbol the user's torch lacks, the one the message names first: the table's (which date
    # the binary) and the gate's (which the table may not know), so the count, the evidence and the
    # details agree.
    lead = lacking[0].symbol if stated else (gate[0].symbol if gate else symbol)
    symbols = list(dict.fromkeys([lead, *(e.symbol for e in lacking), *(p.symbol for p in gate)]))
    more = len(symbols) - 1
    more_words = f" and {more} more symbol{'s' if more > 1 else ''} your torch lacks" if more else ""
    if stated:
        offers = sorted({sig for e in lacking for sig in s.binary.torch_offers.get(e.function, ())})
        message = f"this flash-attn was built for {built.words} (it imports {lacking[0].signature}{more_words})"
        message += f"; your {s.torch_words} exports {'; '.join(offers)}" if offers else f"; your {s.torch_words} does not export it"
    else:
        first = gate[0] if gate else None
        wanted = (first.demangled or first.symbol) if first else (demangle(symbol) or symbol)
        message = f"this flash-attn was built against another torch: it imports {wanted}, which your {s.torch_words} does not export"
        if first and first.offers:
            message += f" (it offers {'; '.join(first.offers)})"
        message += f",{more_words}" if more else ""
    drifted = {p.symbol for p in gate} | {e.symbol for e in built.evidence}
    details = [f"undefined symbol: {symbol}"] if symbol in drifted else []
    for name in symbols[:DETAILED_SYMBOLS]:
        found = by_gate.get(name)
        kind, spelled = (found.kind, found.demangled) if found else (classify.SIGNATURE_DRIFT, signatures.get(name))
        details.append(f"{kind}: {name} = {spelled}" if spelled else f"{kind}: {name}")
    if len(symbols) > DETAILED_SYMBOLS:
        details.append(f"and {len(symbols) - DETAILED_SYMBOLS} more: `faforge doctor --json` lists all {len(symbols)} "
                       "in this problem's evidence.symbols")
    if s.claim and s.claim.torch_minor:
        details.append(f"its {s.claim.source} says torch {s.claim.torch_minor} ({s.claim.text})")
    return Problem("signature-drift", ERROR, message, tuple(details),
                   {"built_for": {"first": built.first, "last": built.last} if stated else None,
                    "torch": torch_release, "symbols": symbols})


def cuda_major_mismatch(s: Situation) -> Problem | None:
    torch_major = _major(s.torch_cuda)
    if torch_major is None or s.binary is None:
        return None
    built = [m for m in s.binary.cudart_majors if m != torch_major]
    source = "it needs " + ", ".join(f"libcudart.so.{m}" for m in built)
    if not s.binary.cudart_majors and s.claim and _major(s.claim.cuda) not in (None, torch_major):
        built, source = [_major(s.claim.cuda)], f"its {s.claim.source} says CUDA {s.claim.cuda} ({s.claim.text})"
    if not built:
        return None
    return Problem("cuda-major-mismatch", ERROR,
                   f"flash-attn was built for CUDA {built[0]} ({source}); your {s.torch_words} uses CUDA {s.torch_cuda}",
                   evidence={"binary_cuda_major": built[0], "torch_cuda": s.torch_cuda})


def libcudart_missing(s: Situation) -> Problem | None:
    torch_major = _major(s.torch_cuda)
    if s.binary is None or torch_major is None:
        return None
    missing = sorted(name for name in _unfound_libraries(s) if name == f"libcudart.so.{torch_major}")
    if not missing:
        return None
    return Problem("libcudart-missing", ERROR,
                   f"{missing[0]} (the CUDA {torch_major} runtime that flash-attn links to) is not installed in this "
                   "environment or on the system library path",
                   evidence={"library": missing[0]})


def _unfound_libraries(s: Situation) -> set[str]:
    """Libraries of the extension that neither the loader model nor the import found; not those that
    are installed where the loader does not look (torch-import-failed names that layout)."""
    unfound = {u.name for u in s.binary.module.unverified_libraries}
    unfound |= {p.library for p in s.binary.module.problems if p.kind == classify.MISSING_LIBRARY and p.library}
    if s.facts.import_outcome.missing_library:
        unfound.add(s.facts.import_outcome.missing_library)
    return unfound - {p.library for p in _misplaced(s)}


def kernel_library(s: Situation) -> Problem | None:
    """A split flash-attn (issue 15) loads its kernels from libflash_attn_kernels.so, which only the
    exact libflash-attn-kernels build its conda record pins provides: another build holds kernels for
    another CUDA, arch list or Philox layout (torch <= 2.9 vs >= 2.10) behind the same file name."""
    if s.binary is None or not s.binary.needs_kernel_library:
        return None
    pin = s.kernel_pin
    installed = next((r for r in s.facts.conda or () if r.name == KERNEL_PACKAGE), None)
    evidence = {"library": KERNEL_LIBRARY, "required": str(pin) if pin else None,
                "installed": f"{installed.name} {installed.version} {installed.build}" if installed else None}
    if pin is not None and installed is not None and (installed.version, installed.build) != (pin.version, pin.build):
        record = s.flash_attn.conda_record
        differences = kernel_build_differences(pin.build, installed.build) or ["another build"]
        return Problem("kernel-library-mismatch", ERROR,
                       f"flash-attn {record.version} ({record.build}) requires exactly {pin}, but this environment has "
                       f"{installed.name} {installed.version} ({installed.build}): {'; '.join(differences)}",
                       (f"{KERNEL_LIBRARY} comes from {installed.name} {installed.version} {installed.build} ({installed.channel_name})",),
                       evidence)
    if s.facts.import_outcome.ok or KERNEL_LIBRARY not in _unfound_libraries(s):
        return None
    if pin is not None and installed is None:
        why = f"its conda package {KERNEL_PACKAGE} is not installed (flash-attn requires {pin})"
    else:
        why = "it is neither in this environment's library directories nor on the system library path"
    return Problem("kernel-library-missing", ERROR,
                   f"flash-attn's extension needs {KERNEL_LIBRARY} (its kernels, package {KERNEL_PACKAGE}), which the loader cannot find: {why}",
                   (f"`import flash_attn_2_cuda` fails: {s.facts.import_outcome.error.message}",) if s.facts.import_outcome.error else (),
                   evidence)


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
            problems.append(Problem("gpu-arch-missing", ERROR,
                                    f"flash-attn's binary holds no GPU code at all; your {gpu.name} (sm_{gpu.capability[0]}{gpu.capability[1]}) cannot run it",
                                    evidence={"gpu": compat.gpu_name(gpu.capability), "sass": [], "ptx": []}))
            continue
        verdict = compat.check(gpu.capability, archs.sass, archs.ptx)
        evidence = {"gpu": verdict.gpu, "sass": list(archs.sass), "ptx": list(archs.ptx)}
        if verdict.status == compat.NONE:
            problems.append(Problem("gpu-arch-missing", ERROR,
                                    f"flash-attn has no kernels for your {gpu.name} ({verdict.gpu}): {verdict.message}",
                                    (verdict.hint,) if verdict.hint else (), evidence))
        elif verdict.status == compat.JIT:
            problems.append(Problem("gpu-arch-jit", WARNING, f"{gpu.name}: {verdict.message}", (), evidence))
    return problems


def _gpus(s: Situation) -> list[Gpu]:
    """GPUs from nvidia-smi, else from torch; one per capability."""
    seen = {}
    for gpu in (*s.facts.gpus, *s.facts.torch.devices):
        key = gpu.capability or gpu.name
        seen.setdefault(key, gpu)
    return list(seen.values())


def no_gpu(s: Situation) -> Problem | None:
    if _gpus(s):
        return None
    return Problem("no-gpu", WARNING,
                   "no NVIDIA GPU is visible here; flash-attn can be imported but not run",
                   (f"nvidia-smi: {s.facts.nvidia_smi}",
                    f"torch: {'no CUDA device' if s.facts.torch.imported else 'not importable'}"))


def import_failed(s: Situation, found: list[Problem]) -> Problem | None:
    outcome = s.facts.import_outcome
    if outcome.ok or not s.facts.extension or any(p.severity == ERROR for p in found):
        return None
    if outcome.crashed:
        return Problem("import-failed", ERROR, f"`import flash_attn_2_cuda` crashed the interpreter ({outcome.crashed})")
    error = outcome.error
    detail = (s.binary_error,) if s.binary_error else ()
    return Problem("import-failed", ERROR, f"`import flash_attn_2_cuda` fails: {error.type}: {error.message}", detail)


def unreadable_metadata(s: Situation) -> Problem | None:
    """Corrupt install records do not stop Python from importing, but the facts read from them are missing."""
    unreadable = s.facts.unreadable_metadata
    if not unreadable:
        return None
    return Problem("unreadable-metadata", WARNING,
                   f"{len(unreadable)} install record(s) could not be read, so how torch or flash-attn was installed "
                   "may be unknown; reinstall the package that owns each file",
                   tuple(f"{u.path}: {u.reason}" for u in unreadable))


RULES = (torch_missing, torch_import_failed, mixed_channels, mixed_conda_pip_torch, cpu_only_torch, python_tag_mismatch,
         wrong_architecture, glibc_too_old, libstdcxx_too_old, cxx11_abi_mismatch, signature_drift, cuda_major_mismatch,
         libcudart_missing, kernel_library, flash_attn_missing, unreadable_metadata)


def diagnose(s: Situation) -> list[Problem]:
    found = [p for rule in RULES if (p := rule(s)) is not None]
    found += gpu_arch(s)
    if (p := import_failed(s, found)) is not None:
        found.append(p)
    if (p := no_gpu(s)) is not None:
        found.append(p)
    return sorted(found, key=lambda p: KINDS.index(p.kind))
