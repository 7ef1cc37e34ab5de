"""Collect the facts about one Python environment: run the probe in it, ask nvidia-smi, parse.

The probe (probe.py) runs inside the target interpreter and only reports; this
module turns its JSON lines into typed facts and adds what is read from outside:
the GPUs nvidia-smi sees. Nothing here judges; faforge.doctor.diagnose does.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import EXIT_BAD_INPUT, EXIT_PROBLEMS, FaforgeError

PROBE = Path(__file__).with_name("probe.py")
MARK = "@@faforge-probe@@"
# Importing a CUDA torch from a cold disk takes tens of seconds; a hung driver or file system must not
# hang doctor. FAFORGE_DOCTOR_TIMEOUT or `doctor --timeout` change it.
PROBE_TIMEOUT_S = 120
# What the probe does after each stage it reports (probe.py's main()), for the progress line.
WAITING_FOR = {None: "the interpreter to start and list its packages", "env": "`import torch`",
               "torch": "`import flash_attn_2_cuda`"}
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
    externally_managed: bool = False  # PEP 668: pip may not install into it; a venv made from it may

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


def resolve_interpreter(given: str | None) -> Path:
    """The interpreter to inspect: --python PATH (a file, or an environment folder), else this one."""
    if given is None:
        return Path(sys.executable)
    if not given.strip():  # `--python "$CONDA_PREFIX"` outside a conda environment
        raise FaforgeError("--python '': empty, as an unset variable such as $CONDA_PREFIX gives",
                           hint="activate the environment first (conda activate NAME), or pass its folder or python")
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


def probe_timeout(given: float | None = None) -> float:
    """--timeout, else FAFORGE_DOCTOR_TIMEOUT, else PROBE_TIMEOUT_S."""
    if given is not None:
        value, source = given, "--timeout"
    else:
        raw = os.environ.get("FAFORGE_DOCTOR_TIMEOUT")
        if raw is None:
            return PROBE_TIMEOUT_S
        source = f"FAFORGE_DOCTOR_TIMEOUT={raw[:40]}"
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
    if not 0 < value <= 24 * 3600:
        raise FaforgeError(f"{source}: not a number of seconds between 0 and 86400", hint="e.g. --timeout 60")
    return value


def _run_bounded(cmd: list[str], source: str, timeout_s: float, on_line: Callable[[str | None], None],
                 **popen) -> tuple[str, str, int | None]:
    """Run cmd with `source` on stdin; stop its whole process group after timeout_s. (stdout, stderr, exit code or None).

    on_line hears None once the process started, then each line of its stdout as it comes."""
    # A new session: the probe and anything it starts (a torch import can spawn helpers) share one
    # process group, so a timeout kills them all, not just the interpreter.
    process = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, **popen)
    on_line(None)
    out, err = bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        try:
            process.stdin.write(source.encode())
            process.stdin.close()
        except BrokenPipeError:
            pass
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, out)
            selector.register(process.stderr, selectors.EVENT_READ, err)
            pending = b""
            while selector.get_map() and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(left):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    key.data.extend(chunk)
                    if key.data is out:
                        *lines, pending = (pending + chunk).split(b"\n")
                        for line in lines:
                            on_line(line.decode(errors="replace"))
        if selector.get_map():  # still open at the deadline: the probe hangs
            return out.decode(errors="replace"), err.decode(errors="replace"), None
        return out.decode(errors="replace"), err.decode(errors="replace"), process.wait(max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:  # closed its output but did not exit
        return out.decode(errors="replace"), err.decode(errors="replace"), None
    finally:
        if process.poll() is None or _group_alive(process.pid):
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()
        process.stdout.close()
        process.stderr.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_probe(python: Path, timeout_s: float = PROBE_TIMEOUT_S,
              progress: Callable[[str], None] = lambda message: None) -> tuple[dict, str | None]:
    """The probe's stages by name, and why it stopped early (None when it finished).

    `progress` hears what the probe is waiting for before each stage, so a slow import is never silent.
    """
    stages: dict = {}

    def on_line(line: str | None) -> None:
        if line is None:
            progress(f"waiting for {WAITING_FOR[None]}: {python} (up to {timeout_s:g} s)")
            return
        if not line.startswith(MARK):
            return
        try:
            data = json.loads(line[len(MARK):])
        except json.JSONDecodeError:
            return
        stage = data.pop("stage", "?")
        stages[stage] = data
        if stage in WAITING_FOR:
            progress(f"waiting for {WAITING_FOR[stage]} in {python} (up to {timeout_s:g} s)")

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "PYTHONSTARTUP")}
    with tempfile.TemporaryDirectory(prefix="faforge-doctor-") as cwd:  # keep the cwd off the target's sys.path
        try:
            # The source goes in on stdin (`python -`), so `ps` shows a short command line.
            stdout, stderr, code = _run_bounded([str(python), "-"], PROBE.read_text(), timeout_s, on_line, cwd=cwd, env=env)
        except OSError as exc:
            raise FaforgeError(f"--python {python}: cannot run it: {exc.strerror or exc}",
                               hint="pass a Python interpreter, e.g. .venv/bin/python") from None
    stopped = f"timed out after {timeout_s:g} s" if code is None else None
    if "env" not in stages:
        if stopped:
            raise FaforgeError(f"--python {python}: {stopped} waiting for {WAITING_FOR[None]}; the probe was stopped "
                               "(with every process it started)",
                               hint="a hung file system or a very slow disk? pass --timeout SECONDS to wait longer",
                               exit_code=EXIT_PROBLEMS)
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
                           py["prefix"], bool(py.get("externally_managed"))),
        system=SystemFacts(system["os"], system["machine"], system.get("glibc"), tuple(system.get("ld_library_path", ()))),
        site_dirs=tuple(env.get("site_dirs", ())),
        conda=None if conda is None else tuple(
            CondaRecord(r["name"], r["version"], r["build"], r["channel"], tuple(r.get("dist_infos", ())), tuple(r.get("depends", ())))
            for r in conda),
        distributions=tuple(
            Distribution(d["name"], d.get("version"), d["path"], d["site"], d.get("installer"), _text(d.get("direct_url")),
                         _text(d.get("cuda_runtime")))
            for d in env.get("distributions", ())),
        torch_package=env.get("torch_package"),
        extension=env.get("extension"),
        extension_files=tuple(env.get("extension_files", ())),
        torch=torch,
        import_outcome=outcome,
        gpus=gpus,
        nvidia_smi=smi,
        unreadable_metadata=tuple(UnreadableMetadata(u["path"], u["reason"]) for u in env.get("unreadable_metadata", ())),
    )


def collect(python: Path, timeout_s: float = PROBE_TIMEOUT_S, progress: Callable[[str], None] = lambda message: None) -> EnvFacts:
    stages, stopped = run_probe(python, timeout_s, progress)
    gpus, smi = nvidia_smi()
    return parse(stages, stopped, gpus, smi)


def _text(value) -> str | None:
    """A string field of installed metadata, or None: a direct_url.json with `"url": 5` is valid JSON
    of the wrong type, and says nothing about where the package came from."""
    return value if isinstance(value, str) else None
