"""A payload of wheels cut into parts that each fit one device call, and put back together there.

The GPU machine has no network and a device call carries at most 64 MiB, working tree included, while FA4's
known-good set weighs about 100 MB (nvidia-cutlass-dsl-libs-cu13 alone is 92 MB). So the wheels, byte for byte as
PyPI serves them, are concatenated and cut into parts of a given size, each in its own folder (part1/, part2/,
...) with the manifest: every wheel's name, size and sha256, every part's size and sha256. A call carries one
part folder; ignored files stay on a warm machine between calls. There, `reassemble` refuses a missing or corrupt
part by name, then checks every wheel's sha256 before anything is installed. Standard library only: it runs on
the GPU machine from the repository's scripts/ folder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from faforge.errors import FaforgeError

MANIFEST = "manifest.json"
SCHEMA_VERSION = 1
CHUNK = 1 << 20


@dataclass(frozen=True)
class Wheel:
    file: str
    size: int
    sha256: str


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def part_name(index: int) -> str:
    return f"part{index + 1}"


def split(wheels: list[Path], out: Path, most_bytes: int, about: dict) -> dict:
    """Write `wheels` (in this order) as the fewest parts of at most `most_bytes`, of equal size but the last,
    under `out`/partN/, each with the manifest (`about`: what the payload is, e.g. its set and Python)."""
    if most_bytes <= 0:
        raise FaforgeError("a part must hold at least one byte", input=str(most_bytes), hint="e.g. 40 MiB")
    entries = [Wheel(w.name, w.stat().st_size, sha256_of(w)) for w in wheels]
    total = sum(w.size for w in entries)
    count = max(1, -(-total // most_bytes))
    part_bytes = max(1, -(-total // count))
    parts, digests = [], [hashlib.sha256() for _ in range(count)]
    out.mkdir(parents=True, exist_ok=True)
    streams = []
    for index in range(count):
        (out / part_name(index)).mkdir(exist_ok=True)
        streams.append(open(out / part_name(index) / f"{part_name(index)}.bin", "wb"))
    try:
        offset = 0
        for wheel in wheels:
            with open(wheel, "rb") as stream:
                while block := stream.read(CHUNK):
                    while block:
                        index, within = divmod(offset, part_bytes)
                        piece = block[: part_bytes - within]
                        streams[index].write(piece)
                        digests[index].update(piece)
                        offset += len(piece)
                        block = block[len(piece) :]
    finally:
        for writer in streams:
            writer.close()
    for index in range(count):
        size = max(0, min(part_bytes, total - index * part_bytes))
        parts.append({"name": part_name(index), "size": size, "sha256": digests[index].hexdigest()})
    manifest = {
        "version": SCHEMA_VERSION,
        **about,
        "part_bytes": part_bytes,
        "wheels": [w.__dict__ for w in entries],
        "parts": parts,
    }
    for index in range(count):
        (out / part_name(index) / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def read_manifest(folder: Path) -> dict:
    """The manifest the part folders under `folder` carry; they must all carry the same one."""
    found = sorted(folder.glob(f"part*/{MANIFEST}"))
    if not found:
        raise FaforgeError(
            f"no part of a payload under {folder} (no part*/{MANIFEST})",
            input=str(folder),
            hint="build it where there is a network: python -m faforge.families.flash_attn_4.gpu_payload build",
        )
    texts = {path.read_text() for path in found}
    if len(texts) != 1:
        raise FaforgeError(
            f"the parts under {folder} come from different payloads ({', '.join(p.parent.name for p in found)})",
            input=str(folder),
            hint="build the payload once and carry each of its part folders",
        )
    manifest = json.loads(texts.pop())
    if manifest.get("version") != SCHEMA_VERSION:
        raise FaforgeError(f"{found[0]}: manifest version {manifest.get('version')!r}, not {SCHEMA_VERSION}")
    return manifest


def part_states(folder: Path, manifest: dict) -> dict[str, str]:
    """{part: "ok", "missing" or "corrupt"}: what a payload call reports of the parts carried so far."""
    states = {}
    for part in manifest["parts"]:
        path = folder / part["name"] / f"{part['name']}.bin"
        states[part["name"]] = (
            "missing"
            if not path.is_file()
            else "ok"
            if path.stat().st_size == part["size"] and sha256_of(path) == part["sha256"]
            else "corrupt"
        )
    return states


def check_parts(folder: Path, manifest: dict) -> list[Path]:
    """Every part's file, each present with its size and sha256; else the first that is not, by name."""
    files = []
    for part in manifest["parts"]:
        path = folder / part["name"] / f"{part['name']}.bin"
        if not path.is_file():
            raise FaforgeError(
                f"part {part['name']} of the payload is missing ({path})",
                input=str(folder),
                hint=f"carry {folder.name}/{part['name']} in a device call (each call carries one part folder)",
            )
        size, digest = path.stat().st_size, sha256_of(path)
        if size != part["size"] or digest != part["sha256"]:
            raise FaforgeError(
                f"part {part['name']} of the payload is corrupt: {size} bytes, sha256 {digest}; "
                f"the manifest says {part['size']} bytes, sha256 {part['sha256']}",
                input=str(path),
                hint="build the payload again where there is a network and carry that part again",
            )
        files.append(path)
    return files


def reassemble(folder: Path, into: Path) -> tuple[dict, list[Path]]:
    """Check every part under `folder`, write the wheels into `into` and check each one's sha256; (the manifest,
    the wheels)."""
    manifest = read_manifest(folder)
    parts = check_parts(folder, manifest)
    into.mkdir(parents=True, exist_ok=True)
    sources = iter(parts)
    source = open(next(sources), "rb")
    written = []
    try:
        for entry in manifest["wheels"]:
            target, left, digest = into / entry["file"], entry["size"], hashlib.sha256()
            with open(target, "wb") as out:
                while left:
                    block = source.read(min(CHUNK, left))
                    if not block:
                        source.close()
                        source = open(next(sources), "rb")
                        continue
                    out.write(block)
                    digest.update(block)
                    left -= len(block)
            if digest.hexdigest() != entry["sha256"]:
                raise FaforgeError(
                    f"{entry['file']} put back together has sha256 {digest.hexdigest()}, not {entry['sha256']}",
                    input=str(folder),
                    hint="build the payload again",
                )
            written.append(target)
    finally:
        source.close()
    return manifest, written
