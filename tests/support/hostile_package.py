"""Turn a real .conda (py-rattler-build's) into a hostile one: its info tarball rewritten with another
info/index.json and extra members (absolute, `../`, links, duplicates). The payload stays as built.
The `zstd` command (tests/system-packages.txt) recompresses."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path


def member(
    name: str, data: bytes = b"x", *, kind: bytes = tarfile.REGTYPE, link: str = ""
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def rewrite(
    source: Path,
    dest: Path,
    *,
    patch: dict | None = None,
    index: bytes | None = None,
    extra: list[tuple[tarfile.TarInfo, bytes]] = (),
) -> Path:
    """`source` with its index.json updated by `patch` (or replaced by `index` bytes) and `extra` members appended."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(dest, "w", zipfile.ZIP_STORED) as new:
        for name in old.namelist():
            data = old.read(name)
            if name.startswith("info-"):
                data = _info(data, patch, index, list(extra))
            new.writestr(name, data)
    return dest


def _info(compressed: bytes, patch, index, extra) -> bytes:
    raw = subprocess.run(["zstd", "-dqc"], input=compressed, capture_output=True, check=True).stdout
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(raw)) as tar,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as new,
    ):
        for info in tar.getmembers():
            data = tar.extractfile(info).read()
            if info.name == "info/index.json":
                data = index if index is not None else json.dumps({**json.loads(data), **(patch or {})}).encode()
                info.size = len(data)
            new.addfile(info, io.BytesIO(data))
        for info, data in extra:
            new.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return subprocess.run(["zstd", "-qc"], input=out.getvalue(), capture_output=True, check=True).stdout
