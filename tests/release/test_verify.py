"""`faforge verify` where no matching torch can exist: every gate is `skipped` with the reason, the
manifest records it for the exact sha256, and the exit status is 3 (never 0)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from faforge.channel.local import PackageSpec, assemble
from faforge.release.manifest import results_for
from faforge.release.package import read_package

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "verify.json").read_text())


def faforge(*args):
    return subprocess.run([sys.executable, "-m", "faforge", *args], capture_output=True, text=True, timeout=600)


def test_foreign_platform_package_is_skipped_not_passed(tmp_path):
    path = assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            "py312_torch2_13_cu130_cxx11abi1_h1234567_0",
            "linux-aarch64",
            depends=("python 3.12.*", "pytorch >=2.13.0,<2.14 cuda130*"),
        ),
        tmp_path / "out",
    )
    manifest = tmp_path / "verification"
    result = faforge("verify", str(path), "--gates", "import,gpu", "--manifest", str(manifest), "--json")
    assert result.returncode == 3, result.stderr
    data = json.loads(result.stdout)
    jsonschema.validate(data, SCHEMA)
    assert {r["gate"]: r["result"] for r in data["results"]} == {"import": "skipped", "gpu": "skipped"}
    details = {
        r["gate"]: r["detail"] for r in data["results"]
    }  # no qemu or no aarch64 Python here: tests/release/test_verify_foreign.py
    assert details["import"].startswith("not run: ") and "GPU runner of that machine (aarch64" in details["gpu"]
    facts = read_package(path)
    recorded = results_for(manifest, facts.sha256)
    assert set(recorded) == {"import", "gpu"} and recorded["import"].cell == "linux-aarch64/py312/torch2.13/cu130/abi1"


def test_package_without_cell_fields_is_skipped(tmp_path):
    path = assemble(PackageSpec("flash-attn", "2.8.3", "pyhd8ed1ab_0", "linux-64"), tmp_path / "out")
    result = faforge("verify", str(path), "--gates", "import", "--manifest", str(tmp_path / "v"))
    assert result.returncode == 3 and "does not name python/torch/CUDA/ABI" in result.stdout + result.stderr


def test_bad_input_is_exit_2(tmp_path):
    missing = faforge("verify", str(tmp_path / "nope.conda"))
    assert missing.returncode == 2 and f"{tmp_path / 'nope.conda'}: no such file" in missing.stderr
    unexpanded = faforge("verify", str(tmp_path / "output/linux-64/*.conda"))  # a shell glob that matched nothing
    assert unexpanded.returncode == 2 and "*.conda: no file matches this pattern" in unexpanded.stderr
    (tmp_path / "notes.txt").write_text("x")
    not_package = faforge("verify", str(tmp_path / "notes.txt"))
    assert not_package.returncode == 2 and "not a conda package file" in not_package.stderr
    path = assemble(PackageSpec("flash-attn", "2.8.3", "pyhd8ed1ab_0", "linux-64"), tmp_path / "out")
    gate = faforge("verify", str(path), "--gates", "abi,nonsense")
    assert gate.returncode == 2 and "unknown gate 'nonsense'" in gate.stderr


def _foreign(tmp_path: Path) -> Path:
    return assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            "py312_torch2_13_cu130_cxx11abi1_h1234567_0",
            "linux-aarch64",
            depends=("python 3.12.*", "pytorch >=2.13.0,<2.14 cuda130*"),
        ),
        tmp_path / "out",
    )


def test_all_gates_skipped_does_not_look_like_a_pass(tmp_path):
    result = faforge("verify", str(_foreign(tmp_path)), "--manifest", str(tmp_path / "v"))
    assert result.returncode == 3
    assert "✓" not in result.stderr
    assert (
        "\N{EN DASH} verify flash-attn-2.8.3.post2-py312_torch2_13_cu130_cxx11abi1_h1234567_0.conda (abi, import)"
        in result.stderr
    )
    assert "skipped: abi, import not verified" in result.stderr


def test_gates_naming_no_gate_is_exit_2(tmp_path):
    for given in ("", " , "):
        result = faforge("verify", str(_foreign(tmp_path)), "--gates", given, "--manifest", str(tmp_path / "v"))
        assert result.returncode == 2 and "names no gate, so nothing would be verified" in result.stderr
        assert not (tmp_path / "v").exists()


def test_each_package_table_is_printed_before_a_later_package_fails(tmp_path):
    first = _foreign(tmp_path)
    result = faforge("verify", str(first), str(tmp_path / "missing.conda"), "--manifest", str(tmp_path / "v"))
    assert result.returncode == 2 and "missing.conda: no such file" in result.stderr
    assert first.name in result.stdout and "skipped" in result.stdout  # the first package's results survived


@pytest.mark.slow  # faforge verify creates the torch venv (its pip install then fails on an empty index)
def test_first_use_of_a_torch_venv_is_announced(tmp_path):
    """Building the cell's torch venv takes from seconds to minutes; the line comes before pip starts.
    pip is pointed at an empty index here, so the install fails fast and the gate is skipped."""
    path = assemble(
        PackageSpec(
            "flash-attn",
            "2.8.3.post2",
            "py311_torch2_14_cu130_cxx11abi1_h1234567_0",
            "linux-64",
            depends=("python 3.11.*", "pytorch >=2.14.1,<2.15 cuda130*"),
        ),
        tmp_path / "out",
    )
    (tmp_path / "no-wheels").mkdir()
    env = {
        **os.environ,
        "FAFORGE_CACHE_DIR": str(tmp_path / "cache"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "no-wheels"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "verify", str(path), "--gates", "import", "--manifest", str(tmp_path / "v")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 3, result.stderr
    assert f"first use: creating {tmp_path / 'cache' / 'torch-venvs'}/torch-2.14.1-py3.11" in result.stderr
    announced = result.stderr.index("first use: creating")
    assert announced < result.stderr.index("import: skipped")


def test_a_package_with_no_extension_fails_its_abi_gate(tmp_path):
    """Nothing in it to load is the package's fault: a failed gate (exit 1, recorded), not bad input (2)."""
    path = assemble(
        PackageSpec("flash-attn", "2.8.3.post2", "py311_torch2_14_cu130_cxx11abi1_h1234567_0", "linux-64"),
        tmp_path / "out",
    )
    torch_lib = tmp_path / "torch" / "lib"
    torch_lib.mkdir(parents=True)
    shutil.copy(sys.executable, torch_lib / "libc10.so")  # a torch library by name: the package is what is judged
    manifest = tmp_path / "v"
    result = faforge("verify", str(path), "--gates", "abi", "--against", str(torch_lib), "--manifest", str(manifest))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "✗" in result.stderr and "abi: failed: " in result.stderr and "no Python extension module" in result.stderr
    recorded = results_for(manifest, read_package(path).sha256)
    assert recorded["abi"].result == "failed" and "no Python extension module" in recorded["abi"].detail
