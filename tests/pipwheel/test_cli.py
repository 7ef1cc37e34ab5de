"""`faforge wheel` on the one real wheel that needs no build: the committed FA3 canary (our own real build).
Fast, so it runs everywhere; test_real_wheels.py does all three kinds on fresh builds."""

from __future__ import annotations

import json
import lzma
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from auditwheel.wheel_abi import analyze_wheel_abi

from faforge.pipwheel.facts import read_wheel
from faforge.pipwheel.manylinux import EXTERNAL
from tests.pipwheel.test_facts import CANARY

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "wheel.json").read_text())


@pytest.fixture(scope="module")
def canary(tmp_path_factory) -> Path:
    raw = tmp_path_factory.mktemp("canary") / CANARY.name.removesuffix(".xz")
    raw.write_bytes(lzma.decompress(CANARY.read_bytes()))
    return raw


def faforge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", "wheel", *args], capture_output=True, text=True, timeout=300
    )


def test_the_fa3_wheel_from_the_canary(canary, tmp_path):
    result = faforge("fa3", str(canary), "--cuda", "13.0", "--archs", "90a", "--out", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["wheel"]["filename"] == "flash_attn_3-3.0.0+cu130.sm90a-cp310-abi3-manylinux_2_34_x86_64.whl"
    assert report["platform"]["limiting"] == ["GLIBCXX_3.4.29", "GLIBC_2.32", "GLIBC_2.34"]
    assert report["platform"]["external"] == ["libcudart.so.13", "libtorch_cpu.so", "libtorch_cuda.so"]
    info = analyze_wheel_abi(
        None, None, Path(report["wheel"]["path"]), frozenset(EXTERNAL), disable_isa_ext_check=False, allow_graft=False
    )
    assert info.overall_policy.name == report["platform"]["tag"]
    assert (
        "+ " in result.stderr
        and "patchelf --set-rpath '$ORIGIN/../torch/lib:$ORIGIN/../nvidia/cu13/lib'" in result.stderr
    )
    assert "✓ fa3 wheel from" in result.stderr
    text = faforge("fa3", str(canary), "--cuda", "13.0", "--archs", "90a", "--out", str(tmp_path / "again"))
    assert text.returncode == 0 and text.stdout.count("\n") == 1, "one summary line"
    assert (
        text.stdout.startswith("fa3 wheel: ")
        and "manylinux_2_34_x86_64: needs GLIBCXX_3.4.29, GLIBC_2.32, GLIBC_2.34" in text.stdout
    )
    assert read_wheel(next((tmp_path / "again").glob("*.whl"))).sha256 == report["wheel"]["sha256"], (
        "the same bytes again"
    )


@pytest.mark.parametrize(
    "argv, code, says",
    [
        (["fa3", "{canary}", "--cuda", "13.0"], 2, "`wheel fa3` needs --archs"),
        (
            ["fa3", "{canary}", "--cuda", "13.0", "--archs", "90a", "--torch", "2.11"],
            2,
            "--torch goes with `wheel glue` and `wheel fa4`, not `wheel fa3`",
        ),
        (
            ["fa3", "{canary}", "--cuda", "13.0", "--archs", "80;90a"],
            1,
            "its GPU code is sm_90a, but --archs 80;90a says sm_80, sm_90a",
        ),
        (
            [
                "glue",
                "{canary}",
                "--kernel-wheel",
                "{canary}",
                "--torch",
                "2.11",
                "--cuda",
                "13.0",
                "--cxx11-abi",
                "1",
                "--build-tag",
                "0h1a2b3c4",
            ],
            2,
            "a flash-attn-3 wheel, not libflash-attn-kernels",
        ),
    ],
)
def test_refusals_are_one_line(canary, tmp_path, argv, code, says):
    result = faforge(*(str(canary) if a == "{canary}" else a for a in argv), "--out", str(tmp_path), "--json")
    assert result.returncode == code and "Traceback" not in result.stderr, result.stderr
    assert says in result.stderr and json.loads(result.stdout)["error"]["message"]
    jsonschema.validate(json.loads(result.stdout), SCHEMA)
    assert not list(tmp_path.glob("*.whl"))
