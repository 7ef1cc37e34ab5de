"""The facts about one Python environment, typed: its interpreter, system, conda records, distributions, torch
and the outcome of importing the extension, and the GPUs nvidia-smi sees.

The probe (probe.py) gathers them inside the target interpreter and only reports; faforge.doctor.probe_facts
runs it and reads its stages into these types. Nothing here judges; faforge.doctor.diagnose does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from faforge.abi.platforms import MACHINE_PLATFORM as PLATFORMS

# conda channel names whose torch is the legacy pre-C++11-ABI build (CONTEXT.md section 2).
LEGACY_TORCH_CHANNELS = ("pytorch", "pytorch-nightly", "pytorch-test")


@dataclass(frozen=True)
class PythonFacts:
    executable: str
    version: str
    implementation: str
    soabi: str | None
    ext_suffix: str | None
    prefix: str
    externally_managed: bool = False  # PEP 668: pip may not install into it; a venv made from it may
    venv: dict[str, str] | None = None  # pyvenv.cfg's keys (uv writes `uv = 0.13.9`); None: not a venv
    pip: bool = True  # whether `python -m pip` can run (uv venvs and `venv --without-pip` have no pip)

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


@dataclass(frozen=True)
class SystemFacts:
    os: str
    machine: str
    glibc: str | None
    ld_library_path: tuple[str, ...]

    @property
    def platform(self) -> str | None:
        return PLATFORMS.get(self.machine) if self.os == "Linux" else None


SUBDIRS = ("linux-64", "linux-aarch64", "noarch", "osx-64", "osx-arm64", "win-64")


@dataclass(frozen=True)
class CondaRecord:
    name: str
    version: str
    build: str
    channel: str
    dist_infos: tuple[str, ...]  # dist-info folders this package installed (relative to the prefix)
    depends: tuple[str, ...] = ()  # its run requirements (flash-attn's exact kernel pin among them)

    @property
    def channel_name(self) -> str:
        """'https://conda.anaconda.org/conda-forge/linux-64' or 'file:///srv/pytorch/' -> the channel's name."""
        parts = [p for p in re.sub(r"^[a-z]+://", "", self.channel_url).split("/") if p]
        return parts[-1] if parts else self.channel

    @property
    def channel_url(self) -> str:
        """The channel without its subdir: 'https://conda.anaconda.org/conda-forge/linux-64' -> '.../conda-forge'."""
        head, _, last = self.channel.rstrip("/").rpartition("/")
        return head if head and last in SUBDIRS else self.channel.rstrip("/")

    @property
    def world(self) -> str:
        """Which torch world the package belongs to: the legacy `pytorch` channel, or conda-forge's."""
        return "pytorch" if self.channel_name in LEGACY_TORCH_CHANNELS else "conda-forge"


@dataclass(frozen=True)
class Distribution:
    """A .dist-info (or .egg-info) of torch or flash-attn on sys.path."""

    name: str
    version: str | None
    path: str
    site: str
    installer: str | None
    direct_url: str | None
    cuda_runtime: str | None = None  # "12.1": the CUDA runtime its METADATA requires (PyPI torch)


@dataclass(frozen=True)
class UnreadableMetadata:
    """A metadata file the probe could not read (corrupt JSON, a field of the wrong type)."""

    path: str
    reason: str


@dataclass(frozen=True)
class ProbeError:
    type: str
    message: str


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int] | None
    driver: str | None
    seen_by: str  # "nvidia-smi" or "torch"


@dataclass(frozen=True)
class TorchRuntime:
    """What `import torch` said in the target interpreter."""

    imported: bool
    version: str | None = None
    cuda: str | None = None
    cxx11_abi: int | None = None
    cuda_available: bool = False
    devices: tuple[Gpu, ...] = ()
    error: ProbeError | None = None


@dataclass(frozen=True)
class ImportOutcome:
    """`import flash_attn_2_cuda` after `import torch`, as flash_attn itself does it."""

    ran: bool
    ok: bool = False
    error: ProbeError | None = None
    crashed: str | None = None  # the probe died (signal, timeout) before reporting

    @property
    def undefined_symbol(self) -> str | None:
        return _search(r"undefined symbol: (\S+)", self.error)

    @property
    def missing_library(self) -> str | None:
        return _search(r"(\S+?): cannot open shared object file", self.error)

    @property
    def missing_version(self) -> str | None:
        return _search(r"version `([^']+)' not found", self.error)

    @property
    def not_found(self) -> bool:
        return self.error is not None and self.error.type == "ModuleNotFoundError"


def _search(pattern: str, error: ProbeError | None) -> str | None:
    match = re.search(pattern, error.message) if error else None
    return match.group(1) if match else None


@dataclass(frozen=True)
class EnvFacts:
    """Everything the probe reported, typed."""

    python: PythonFacts
    system: SystemFacts
    site_dirs: tuple[str, ...]
    conda: tuple[CondaRecord, ...] | None  # None: not a conda prefix (no conda-meta/)
    distributions: tuple[Distribution, ...]
    torch_package: str | None  # the folder `import torch` would load
    extension: str | None  # the file `import flash_attn_2_cuda` would load
    extension_files: tuple[str, ...]  # every flash_attn_2_cuda*.so on sys.path, whatever its tag
    torch: TorchRuntime
    import_outcome: ImportOutcome
    gpus: tuple[Gpu, ...]  # from nvidia-smi
    nvidia_smi: str  # "ok", "not found", or why it failed
    unreadable_metadata: tuple[UnreadableMetadata, ...] = ()

    def conda_record(self, name: str) -> CondaRecord | None:
        return next((r for r in self.conda or () if r.name == name), None)

    def distributions_of(self, name: str) -> tuple[Distribution, ...]:
        return tuple(d for d in self.distributions if d.name == name)
