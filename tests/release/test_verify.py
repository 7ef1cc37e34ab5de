"""`faforge verify` where no matching torch can exist: every gate is `skipped` with the reason, the
manifest records it for the exact sha256, and the exit status is 3 (never 0)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema

from faforge.channel.local import PackageSpec, assemble
from faforge.release.manifest import results_for
from faforge.release.package import read_package

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "verify.json").read_text())


def faforge(*args):
    return subprocess.run([sys.executable, "-m", "faforge", *args], capture_output=True, text=True, timeout=600)


def test_foreign_platform_package_is_skipped_not_passed(tmp_path):
    path = assemble(PackageSpec("flash-attn", "2.8.3.post2", "py312_torch2_13_cu130_cxx11abi1_h1234567_0", "linux-aarch64",
                                depends=("python 3.12.*", "pytorch >=2.13.0,<2.14 cuda130*")), tmp_path / "out")
    manifest = tmp_path / "verification"
    result = faforge("verify", str(path), "--gates", "import,gpu", "--manifest", str(manifest), "--json")
    assert result.returncode == 3, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    assert {r["gate"]: r["result"] for r in data["results"]} == {"import": "skipped", "gpu": "skipped"}
    assert all("linux-aarch64 package cannot be imported" in r["detail"] for r in data["results"])
    facts = read_package(path)
    recorded = results_for(manifest, facts.sha256)
    assert set(recorded) == {"import", "gpu"} and recorded["import"].cell == "linux-aarch64/py312/torch2.13/cu130/abi1"


def test_package_without_cell_fields_is_skipped(tmp_path):
    path = assemble(PackageSpec("flash-attn", "2.8.3", "pyhd8ed1ab_0", "linux-64"), tmp_path / "out")
    result = faforge("verify", str(path), "--gates", "import", "--manifest", str(tmp_path / "v"))
    assert result.returncode == 3 and "does not name python/torch/CUDA/ABI" in result.stdout + result.stderr


def test_bad_input_is_exit_2(tmp_path):
    missing = faforge("verify", str(tmp_path / "nope.conda"))
    assert missing.returncode == 2 and "not a conda package file" in missing.stderr
    path = assemble(PackageSpec("flash-attn", "2.8.3", "pyhd8ed1ab_0", "linux-64"), tmp_path / "out")
    gate = faforge("verify", str(path), "--gates", "abi,nonsense")
    assert gate.returncode == 2 and "unknown gate 'nonsense'" in gate.stderr
