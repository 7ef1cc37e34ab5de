"""`faforge wheel fa4`: upstream's FA4 wheel repacked per known-good set (faforge.families.flash_attn_4.wheel), placed
by the index's torch-range rule in exactly its set's index, and judged by verify's metadata gate. The real wheel
(568 KB, from PyPI, cached) makes these slow but for the refusal of a wheel that is not upstream's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from packaging.requirements import Requirement

from faforge.families.flash_attn_4 import sets
from faforge.families.flash_attn_4.verify import metadata_gate
from faforge.families.flash_attn_4.wheel import FA4_WHEEL, repack_fa4_wheel
from faforge.family import FLASH_ATTN_4
from faforge.pipindex.placement import place
from faforge.pipwheel.facts import read_wheel, wheel_contents
from faforge.pipwheel.writer import WheelSpec, record_hash, write_wheel
from faforge.release.verify.wheel_identity import wheel_package
from faforge.wheelnames import torch_requirement
from tests.support import tiny_wheels
from tests.support.cache import cache_dir
from tests.support.fa4_upstream import upstream_wheel
from tests.support.tiers import slow

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "wheel.json").read_text())
DATA = sets.load()


def faforge(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "faforge", "wheel", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
@slow("downloads upstream's FA4 wheel from PyPI once (568 KB, cached)")
def upstream() -> Path:
    return upstream_wheel()


def test_a_wheel_that_is_not_upstreams_is_refused_naming_the_release_rows(tmp_path):
    release = DATA.releases[0]
    fake = write_wheel(
        WheelSpec(
            name=FLASH_ATTN_4.package,
            version=release.version,
            python_tags=("py3",),
            abi_tags=("none",),
            platform_tags=("any",),
            files={"flash_attn/cute/__init__.py": b"x = 1\n"},
        ),
        tmp_path,
    )
    assert fake.name == release.wheel
    result = faforge("fa4", str(fake), "--torch", "2.14", "--cuda", "13.0", "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    assert "is none of the flash-attn-4 releases" in result.stderr and release.sha256[:12] in result.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    options = faforge("fa4", str(fake), "--torch", "2.14", "--out", str(tmp_path / "out"))
    assert options.returncode == 2 and "`wheel fa4` needs --cuda" in options.stderr


@pytest.mark.parametrize("known", DATA.sets, ids=lambda s: s.id)
def test_the_wheel_of_each_set_keeps_upstreams_files_and_pins_the_set(upstream, known, tmp_path):
    result = faforge(
        "fa4", str(upstream), "--torch", known.torch, "--cuda", known.cuda, "--out", str(tmp_path), "--json"
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    wheel = report["wheel"]
    assert wheel["filename"] == f"flash_attn_4-{known.version}+{known.local_label}-py3-none-any.whl"
    requires = [str(Requirement(r)) for r in wheel["requires_dist"]]
    assert requires[0] == str(Requirement(torch_requirement(known.torch))), "its one torch minor"
    assert requires[1:] == [str(Requirement(r)) for r in DATA.requirements(known)]
    assert all(("==" if n in DATA.exact else ">=") in r for n, r in zip(known.packages, requires[1:], strict=True))
    ours, theirs = wheel_contents(Path(wheel["path"])), wheel_contents(upstream)
    outside = lambda files: {n: d for n, d in files.items() if ".dist-info/" not in n}  # noqa: E731
    assert outside(ours) == outside(theirs) and len(outside(ours)) == 58, "upstream's modules, byte for byte"
    info = f"flash_attn_4-{known.version}+{known.local_label}.dist-info"
    assert {n.rsplit("/", 1)[-1] for n in ours if n.startswith(info)} >= {"LICENSE", "AUTHORS", "top_level.txt"}
    record = {row.split(",")[0]: row.split(",")[1] for row in ours[f"{info}/RECORD"].decode().splitlines()}
    assert all(record[n] == record_hash(d) for n, d in ours.items() if not n.endswith("/RECORD")), "RECORD is new"
    metadata = ours[f"{info}/METADATA"].decode()
    assert "Author: Tri Dao" in metadata and "Provides-Extra" not in metadata and "Project-URL: Homepage" in metadata
    # the set's oldest Python, not upstream's >=3.10: pip and uv on 3.10 say so instead of failing to resolve
    assert "\nRequires-Python: >=3.11\n" in metadata
    assert (
        faforge(
            "fa4", str(upstream), "--torch", known.torch, "--cuda", known.cuda, "--out", str(tmp_path / "b")
        ).returncode
        == 0
    )
    assert read_wheel(tmp_path / "b" / wheel["filename"]).sha256 == wheel["sha256"], "the same bytes again"


def test_each_set_wheel_is_placed_in_exactly_its_index_and_passes_the_metadata_gate(upstream, tmp_path):
    built = [repack_fa4_wheel(upstream, torch=s.torch, cuda=s.cuda, out_dir=tmp_path) for s in DATA.sets]
    glues = [tiny_wheels.build_wheel(tiny_wheels.glue(s.torch, pin_torch=True), tmp_path / "glue") for s in DATA.sets]
    placement = place([read_wheel(p) for p in glues] + [b.facts for b in built])
    for known, wheel in zip(DATA.sets, built, strict=True):
        assert placement.indexes_of(wheel.path.name) == (known.id,)
        check = metadata_gate(wheel_package(wheel.path, (FA4_WHEEL,)), DATA)
        assert check.result == "passed" and known.id in check.detail, check
    contents, facts = wheel_contents(built[0].path), built[0].facts
    loose = write_wheel(
        WheelSpec(
            name=facts.name,
            version=facts.version,
            python_tags=facts.python_tags,
            abi_tags=facts.abi_tags,
            platform_tags=facts.platform_tags,
            requires_dist=tuple(r.replace("nvidia-cutlass-dsl==", "nvidia-cutlass-dsl>=") for r in facts.requires_dist),
            files={n: d for n, d in contents.items() if ".dist-info/" not in n},
        ),
        tmp_path / "tampered",
    )
    check = metadata_gate(wheel_package(loose, (FA4_WHEEL,)), DATA)
    assert check.result == "failed" and "nvidia-cutlass-dsl==4.8.1" in check.detail, check


def test_verify_passes_its_metadata_and_import_gates_and_leaves_gpu_to_the_gpu_stage(upstream, tmp_path):
    """`faforge verify --gates abi,import,gpu` of the torch 2.14 set's wheel: real pip installs it from a loopback
    index, the set from PyPI, into a copy of the cached venv of PyPI's torch 2.14.1, and imports flash_attn.cute on
    this CPU machine (no driver); gpu is skipped, so the exit status is 3."""
    known = DATA.set_for("2.14", "13.0")
    wheel = repack_fa4_wheel(upstream, torch=known.torch, cuda=known.cuda, out_dir=tmp_path).path
    manifest = ["--manifest", str(tmp_path / "manifest")]
    result = subprocess.run(
        [sys.executable, "-m", "faforge", "verify", "--gates", "abi,import,gpu", "--json", *manifest, str(wheel)],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "FAFORGE_CACHE_DIR": str(cache_dir("faforge"))},  # the cached torch venvs
    )
    assert result.returncode == 3, result.stderr[-3000:]
    checks = {r["gate"]: r for r in json.loads(result.stdout)["results"]}
    assert (checks["abi"]["result"], checks["import"]["result"], checks["gpu"]["result"]) == (
        "passed",
        "passed",
        "skipped",
    ), checks
    assert "imported flash_attn.cute" in checks["import"]["detail"] and "torch kept" in checks["import"]["detail"]
    assert known.id in checks["abi"]["detail"]
