"""Collect the facts about one Python environment: run the probe in it, ask nvidia-smi, and read both into the
typed facts of faforge.doctor.facts.

The probe's stages are JSON it printed in an interpreter faforge does not trust (faforge.doctor.probe_lines has
checked their keys and types); a stage it did not reach (a crash, the deadline) becomes a fact of its own.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from faforge.doctor.facts import (
    CondaRecord,
    Distribution,
    EnvFacts,
    Gpu,
    ImportOutcome,
    ProbeError,
    PythonFacts,
    SystemFacts,
    TorchRuntime,
    UnreadableMetadata,
)
from faforge.doctor.probe_run import PROBE_TIMEOUT_S, run_probe

NVIDIA_SMI_TIMEOUT_S = 30


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
        number = re.fullmatch(r"(\d+)\.(\d+)", cap)
        capability = (int(number[1]), int(number[2])) if number else None
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
            imported=torch_raw["imported"],
            version=torch_raw.get("version"),
            cuda=torch_raw.get("cuda"),
            cxx11_abi=torch_raw.get("cxx11_abi"),
            cuda_available=bool(torch_raw.get("cuda_available")),
            devices=devices,
            error=_error(torch_raw.get("error")),
        )
    imported = stages.get("import")
    if imported is None:
        outcome = ImportOutcome(ran=True, crashed=stopped or "no result")
    else:
        outcome = ImportOutcome(ran=True, ok=imported["ok"], error=_error(imported.get("error")))
    conda = env.get("conda")
    return EnvFacts(
        python=PythonFacts(
            py["executable"],
            py["version"],
            py["implementation"],
            py.get("soabi"),
            py.get("ext_suffix"),
            py["prefix"],
            bool(py.get("externally_managed")),
            _venv(py.get("venv")),
            bool(py.get("pip", True)),
        ),
        system=SystemFacts(
            system["os"], system["machine"], system.get("glibc"), tuple(system.get("ld_library_path", ()))
        ),
        site_dirs=tuple(env.get("site_dirs", ())),
        conda=None
        if conda is None
        else tuple(
            CondaRecord(
                r["name"],
                r["version"],
                r["build"],
                r["channel"],
                tuple(r.get("dist_infos", ())),
                tuple(r.get("depends", ())),
            )
            for r in conda
        ),
        distributions=tuple(
            Distribution(
                d["name"],
                d.get("version"),
                d["path"],
                d["site"],
                d.get("installer"),
                _text(d.get("direct_url")),
                _text(d.get("cuda_runtime")),
            )
            for d in env.get("distributions", ())
        ),
        torch_package=env.get("torch_package"),
        extension=env.get("extension"),
        extension_files=tuple(env.get("extension_files", ())),
        torch=torch,
        import_outcome=outcome,
        gpus=gpus,
        nvidia_smi=smi,
        unreadable_metadata=tuple(
            UnreadableMetadata(u["path"], u["reason"]) for u in env.get("unreadable_metadata", ())
        ),
    )


def collect(
    python: Path,
    timeout_s: float = PROBE_TIMEOUT_S,
    progress: Callable[[str], None] = lambda message: None,
    names: tuple[str, str, str] | None = None,
) -> EnvFacts:
    stages, stopped = run_probe(python, timeout_s, progress, *([names] if names else []))
    gpus, smi = nvidia_smi()
    return parse(stages, stopped, gpus, smi)


def _venv(raw: object) -> dict[str, str] | None:
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else None


def _text(value: object) -> str | None:
    """A string field of installed metadata, or None: a direct_url.json with `"url": 5` is valid JSON
    of the wrong type, and says nothing about where the package came from."""
    return value if isinstance(value, str) else None
