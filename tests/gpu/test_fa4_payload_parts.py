"""The payload's parts (faforge.families.flash_attn_4.gpu_payload_parts) on small stand-in wheels: cut into the
fewest parts under the limit, put back together from the parts alone byte for byte, and a missing, corrupt or
foreign part refused by name before anything is written."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from faforge.errors import FaforgeError
from faforge.families.flash_attn_4.gpu_payload_parts import (
    MANIFEST,
    part_states,
    read_manifest,
    reassemble,
    sha256_of,
    split,
)


@pytest.fixture
def wheels(tmp_path):
    folder = tmp_path / "wheels"
    folder.mkdir()
    sizes = {"a-1-py3-none-any.whl": 2500, "b-2-cp312-cp312-manylinux_2_28_x86_64.whl": 7001, "c-3-py3-none-any.whl": 1}
    for name, size in sizes.items():
        (folder / name).write_bytes(os.urandom(size))
    return [folder / name for name in sizes]


def carried(payload, tmp_path, names):
    """Only the part folders a device call carried, nothing of the downloads."""
    there = tmp_path / "there" / "gpu-payload"
    there.mkdir(parents=True)
    for name in names:
        shutil.copytree(payload / name, there / name)
    return there


def test_the_parts_put_back_together_are_the_wheels_byte_for_byte(wheels, tmp_path):
    manifest = split(wheels, tmp_path / "payload", 4000, {"set": "torch2.11-cu130", "python": "3.12"})
    assert [p["name"] for p in manifest["parts"]] == ["part1", "part2", "part3"]
    assert [p["size"] for p in manifest["parts"]] == [3168, 3168, 3166]  # 9502 bytes, the fewest parts <= 4000
    assert all((tmp_path / "payload" / p / MANIFEST).is_file() for p in ("part1", "part2", "part3"))
    there = carried(tmp_path / "payload", tmp_path, ["part1", "part2", "part3"])
    got, written = reassemble(there, tmp_path / "out")
    assert got == manifest and [w.name for w in written] == [w.name for w in wheels]
    assert all(w.read_bytes() == original.read_bytes() for w, original in zip(written, wheels, strict=True))
    assert [sha256_of(w) for w in written] == [entry["sha256"] for entry in manifest["wheels"]]


def test_a_missing_part_is_refused_by_name(wheels, tmp_path):
    split(wheels, tmp_path / "payload", 4000, {})
    there = carried(tmp_path / "payload", tmp_path, ["part1", "part3"])
    assert part_states(there, read_manifest(there)) == {"part1": "ok", "part2": "missing", "part3": "ok"}
    with pytest.raises(FaforgeError, match=r"part part2 of the payload is missing") as caught:
        reassemble(there, tmp_path / "out")
    assert "carry gpu-payload/part2 in a device call" in caught.value.hint
    assert not (tmp_path / "out").exists()


def test_a_corrupt_part_is_refused_by_name(wheels, tmp_path):
    split(wheels, tmp_path / "payload", 4000, {})
    there = carried(tmp_path / "payload", tmp_path, ["part1", "part2", "part3"])
    data = bytearray((there / "part3" / "part3.bin").read_bytes())
    data[100] ^= 0xFF
    (there / "part3" / "part3.bin").write_bytes(bytes(data))
    assert part_states(there, read_manifest(there)) == {"part1": "ok", "part2": "ok", "part3": "corrupt"}
    with pytest.raises(FaforgeError, match=r"part part3 of the payload is corrupt: 3166 bytes, sha256 [0-9a-f]{64}"):
        reassemble(there, tmp_path / "out")


def test_parts_of_two_payloads_are_refused(wheels, tmp_path):
    split(wheels, tmp_path / "payload", 4000, {"set": "torch2.11-cu130"})
    there = carried(tmp_path / "payload", tmp_path, ["part1", "part2", "part3"])
    manifest = json.loads((there / "part2" / MANIFEST).read_text())
    (there / "part2" / MANIFEST).write_text(json.dumps({**manifest, "set": "torch2.14-cu130"}))
    with pytest.raises(FaforgeError, match="come from different payloads"):
        reassemble(there, tmp_path / "out")


def test_no_part_at_all_says_how_to_build_one(tmp_path):
    with pytest.raises(FaforgeError, match="no part of a payload") as caught:
        reassemble(tmp_path, tmp_path / "out")
    assert "gpu_payload build" in caught.value.hint
