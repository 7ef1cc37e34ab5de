"""FlashAttention-4's data file (variants/flash-attn-4.yaml) through its reader: the committed file reads, its
sets agree with the release they name, and each way a row can be malformed is a DataError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from faforge.errors import DataError
from faforge.families.flash_attn_4 import sets
from tests.conftest import REPO

DATA = REPO / "variants" / "flash-attn-4.yaml"


def test_the_committed_data_reads_and_each_set_satisfies_its_release() -> None:
    data = sets.load(DATA)
    assert data.sets, "no known-good set"
    releases = {r.version: r for r in data.releases}
    for kgs in data.sets:
        release = releases[kgs.version]
        # every requirement upstream declares (but torch) is in the set, at a version it admits
        for line in release.requires:
            req = Requirement(line)
            name = req.name.lower().replace("_", "-")
            if name == "torch":
                continue
            assert name in kgs.packages, f"{kgs.id}: {name} is required by {kgs.version} but not in the set"
            assert SpecifierSet(str(req.specifier)).contains(kgs.packages[name], prereleases=True), (kgs.id, line)
        # the undeclared imports are in it too: triton (quack) and packaging (torch-c-dlpack-ext)
        assert {"triton", "packaging", "cuda-bindings", "nvidia-cutlass-dsl-libs-base"} <= set(kgs.packages)


def test_requirements_follow_the_pin_policy() -> None:
    data = sets.load(DATA)
    kgs = data.set_for("2.11", "13.0")
    assert kgs is not None and kgs.id == "torch2.11-cu130" and kgs.local_label == "cu130.torch2.11"
    lines = {Requirement(r).name: str(Requirement(r).specifier) for r in data.requirements(kgs)}
    assert lines["quack-kernels"] == "==0.6.5"
    assert lines["triton"] == "==3.6.0"  # torch 2.11.0's own exact pin
    assert lines["packaging"] == ">=25.0"
    assert data.set_for("2.3", "13.0") is None


def _write(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load(DATA.read_text())
    mutate(raw)
    path = tmp_path / "flash-attn-4.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


BROKEN = {
    "unknown key": (lambda r: r["sets"][0].update(extra=1), r"sets\[0\]: unknown keys \['extra'\]"),
    "release not listed": (lambda r: r["sets"][0].update(version="4.0.0b99"), r"sets\[0\]\.version: 4\.0\.0b99 is not"),
    "bad version": (lambda r: r["sets"][0]["packages"].update(triton="three"), r"triton: 'three' is not a PEP"),
    "bad torch minor": (lambda r: r["sets"][0].update(torch="2.11.0"), r"sets\[0\]\.torch: '2\.11\.0' is not"),
    "bad platform": (lambda r: r["sets"][0].update(platforms=["win-64"]), r"sets\[0\]\.platforms"),
    "unpinned package": (lambda r: r["sets"][0]["packages"].update(numpy="2.0"), r"\['numpy'\] are in neither"),
    "bad proof level": (
        lambda r: r["sets"][0].update(
            proofs=[{"level": "vibes", "platform": "linux-64", "python": "3.12", "where": "x", "date": "d", "by": "b"}]
        ),
        r"proofs\[0\]\.level: 'vibes' is none of",
    ),
    "bad digest": (lambda r: r["releases"][0].update(sha256="00"), r"releases\[0\]\.sha256"),
    "duplicate set": (lambda r: r["sets"].append(dict(r["sets"][0])), r"two sets have the same"),
    "not a mapping": (lambda r: r.update(sets=[1]), r"sets\[0\]: 1 is not a mapping"),
    "schema": (lambda r: r.update(schema=2), r"schema: 2 is not 1"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_malformed_row_is_refused_by_its_key(tmp_path: Path, case: str) -> None:
    mutate, message = BROKEN[case]
    with pytest.raises(DataError, match=message):
        sets.load(_write(tmp_path, mutate))
