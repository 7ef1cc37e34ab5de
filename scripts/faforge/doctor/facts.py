"""Collect the facts about one Python environment: run the probe in it, ask nvidia-smi, parse.

The probe (probe.py) runs inside the target interpreter and only reports; this
module turns its JSON lines into typed facts and adds what is read from outside:
the GPUs nvidia-smi sees. Nothing here judges; faforge.doctor.diagnose does.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import EXIT_BAD_INPUT, FaforgeError

PROBE = Path(__file__).with_name("probe.py")
MARK = "@@faforge-probe@@"
PROBE_TIMEOUT_S = 300  # importing a CUDA torch on a cold disk takes a while; a hung driver must not hang us
NVIDIA_SMI_TIMEOUT_S = 30
# `uname -m` -> conda subdir.
PLATFORMS = {"x86_64": "linux-64", "aarch64": "linux-aarch64"}
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

    def conda_record(self, name: str) -> CondaRecord | None:
        return next((r for r in self.conda or () if r.name == name), None)

    def distributions_of(self, name: str) -> tuple[Distribution, ...]:
        return tuple(d for d in self.distributions if d.name == name)


def resolve_interpreter(given: str | None) -> Path:
    """The interpreter to inspect: --python PATH (a file, or an environment folder), else this one."""
    if given is None:
        return Path(sys.executable)
    path = Path(os.path.abspath(Path(given).expanduser()))  # absolute, but keep the venv's symlink
    if path.is_dir():
        candidates = [path / "bin" / "python", path / "bin" / "python3"]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise FaforgeError(f"--python {given}: a folder without bin/python; pass an interpreter or an environment folder",
                               hint="e.g. --python ~/venvs/train/bin/python or --python $CONDA_PREFIX")
        return found
    if not path.exists():
        raise FaforgeError(f"--python {given}: no such file", hint="pass the python of the environment to inspect, e.g. $CONDA_PREFIX/bin/python")
    if not os.access(path, os.X_OK):
        raise FaforgeError(f"--python {given}: not executable, so not a Python interpreter",
                           hint="pass the python of the environment to inspect, e.g. .venv/bin/python")
    return path


def run_probe(python: Path, timeout_s: int = PROBE_TIMEOUT_S) -> tuple[dict, str | None]:
    """The probe's stages by name, and why it stopped early (None when it finished)."""
    source = PROBE.read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    with tempfile.TemporaryDirectory(prefix="faforge-doctor-") as cwd:  # keep the cwd off the target's sys.path
        try:
            # The source goes in on stdin (`python -`), so `ps` shows a short command line.
            result = subprocess.run([str(python), "-"], input=source, capture_output=True, text=True, cwd=cwd, env=env,
                                    timeout=timeout_s, errors="replace")
            stdout, stderr, code, stopped = result.stdout, result.stderr, result.returncode, None
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr, code, stopped = "", None, f"timed out after {timeout_s}s"
        except OSError as exc:
            raise FaforgeError(f"--python {python}: cannot run it: {exc.strerror or exc}",
                               hint="pass a Python interpreter, e.g. .venv/bin/python") from None
    stages = {}
    for line in stdout.splitlines():
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK):])
            except json.JSONDecodeError:
                continue
            stages[data.pop("stage", "?")] = data
    if "env" not in stages:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
        raise FaforgeError(f"--python {python}: did not run faforge's probe, so it is not a usable Python 3 interpreter "
                           f"(exit {code}: {tail[0][:200]})", hint="pass the python of the environment to inspect",
                           exit_code=EXIT_BAD_INPUT)
    if stopped is None and code != 0:
        stopped = f"the interpreter died with {'signal ' + str(-code) if code < 0 else 'exit code ' + str(code)}"
    return stages, stopped


def nvidia_smi() -> tuple[tuple[Gpu, ...], str]:
    """GPUs as the driver sees them, tolerant of a machine without NVIDIA tools."""
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return (), "not found"
    query = [binary, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"]
    try:
        result = subprocess.run(query, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (), f"failed: {exc}"
    if result.returncode != 0:
        return (), f"failed: {(result.stdout + result.stderr).strip()[:200]}"
    gpus = []
    for line in result.stdout.strip().splitlines():
        name, cap, driver = ([p.strip() for p in line.split(",")] + ["", "", ""])[:3]
        capability = tuple(int(x) for x in cap.split(".")) if re.fullmatch(r"\d+\.\d+", cap) else None
        gpus.append(Gpu(name, capability, driver or None, "nvidia-smi"))
    return tuple(gpus), "ok"


def _error(raw: dict | None) -> ProbeError | None:
    return ProbeError(raw["type"], raw["message"]) if raw else None


def parse(stages: dict, stopped: str | None, gpus: tuple[Gpu, ...], smi: str) -> EnvFacts:
    env = stages["env"]
    py, system = env["python"], env["system"]
    torch_raw = stages.get("torch")
    if torch_raw is None:
        torch = TorchRuntime(False, error=ProbeError("ProbeStopped", f"`import torch` did not finish: {stopped}"))
    else:
        devices = tuple(Gpu(d["name"], tuple(d["capability"]), None, "torch") for d in torch_raw.get("devices", []))
        torch = TorchRuntime(
            imported=torch_raw["imported"], version=torch_raw.get("version"), cuda=torch_raw.get("cuda"),
            cxx11_abi=torch_raw.get("cxx11_abi"), cuda_available=bool(torch_raw.get("cuda_available")),
            devices=devices, error=_error(torch_raw.get("error")),
        )
    imported = stages.get("import")
    if imported is None:
        outcome = ImportOutcome(ran=True, crashed=stopped or "no result")
    else:
        outcome = ImportOutcome(ran=True, ok=imported["ok"], error=_error(imported.get("error")))
    conda = env.get("conda")
    return EnvFacts(
        python=PythonFacts(py["executable"], py["version"], py["implementation"], py.get("soabi"), py.get("ext_suffix"),
                           py["prefix"]),
        system=SystemFacts(system["os"], system["machine"], system.get("glibc"), tuple(system.get("ld_library_path", ()))),
        site_dirs=tuple(env.get("site_dirs", ())),
        conda=None if conda is None else tuple(
            CondaRecord(r["name"], r["version"], r["build"], r["channel"], tuple(r.get("dist_infos", ())), tuple(r.get("depends", ())))
            for r in conda),
        distributions=tuple(
            Distribution(d["name"], d.get("version"), d["path"], d["site"], d.get("installer"), _text(d.get("direct_url")))
            for d in env.get("distributions", ())),
        torch_package=env.get("torch_package"),
        extension=env.get("extension"),
        extension_files=tuple(env.get("extension_files", ())),
        torch=torch,
        import_outcome=outcome,
        gpus=gpus,
        nvidia_smi=smi,
    )


def collect(python: Path) -> EnvFacts:
    stages, stopped = run_probe(python)
    gpus, smi = nvidia_smi()
    return parse(stages, stopped, gpus, smi)


def _text(value) -> str | None:
    """A string field of installed metadata, or None: a direct_url.json with `"url": 5` is valid JSON
    of the wrong type, and says nothing about where the package came from."""
    return value if isinstance(value, str) else None
