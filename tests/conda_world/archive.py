"""Write .conda packages the way conda-build and rattler-build lay them out, with the parts
py-rattler-build's assembler cannot write: run_exports.json, link.json for noarch python, and
text files whose build prefix the installer must rewrite (paths.json `prefix_placeholder`).

A .conda is a stored zip of metadata.json and two zstd tarballs, info-*.tar.zst and pkg-*.tar.zst
(https://docs.conda.io/projects/conda-build/en/stable/resources/package-spec.html). The `zstd`
command compresses (Debian's zstd; listed in tests/system-packages.txt).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from faforge.packagefile import sha256_of

# conda-build's classic placeholder; any prefix-length string works for text files.
PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"


@dataclass(frozen=True)
class Record:
    """The metadata a package's info/index.json (and run_exports.json) carry."""

    name: str
    version: str
    build: str
    build_number: int
    subdir: str
    depends: tuple[str, ...] = ()
    constrains: tuple[str, ...] = ()
    noarch: str | None = None
    track_features: tuple[str, ...] = ()
    run_exports: dict = field(default_factory=dict)
    license: str = ""

    @property
    def filename(self) -> str:
        return f"{self.name}-{self.version}-{self.build}.conda"


def _paths_json(root: Path, text_prefix_files: set[str]) -> dict:
    entries = []
    for path in sorted(p for p in root.rglob("*") if p.is_symlink() or p.is_file()):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            entries.append(
                {
                    "_path": rel,
                    "path_type": "softlink",
                    "sha256": hashlib.sha256(os.readlink(path).encode()).hexdigest(),
                    "size_in_bytes": 0,
                }
            )
            continue
        entry = {"_path": rel, "path_type": "hardlink", "sha256": sha256_of(path), "size_in_bytes": path.stat().st_size}
        if rel in text_prefix_files:
            entry.update(prefix_placeholder=PLACEHOLDER, file_mode="text")
        entries.append(entry)
    return {"paths": entries, "paths_version": 1}


def _zstd_tar(members_root: Path, names: list[str], out: Path, level: int) -> None:
    """tar members_root/names into out with zstd; symlinks stay symlinks, owners are normalised."""
    with tempfile.NamedTemporaryFile(dir=out.parent, suffix=".tar") as raw:
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:

            def reset(info: tarfile.TarInfo) -> tarfile.TarInfo:
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                return info

            for name in names:
                tar.add(members_root / name, arcname=name, recursive=False, filter=reset)
        raw.flush()
        subprocess.run(["zstd", "-q", "-f", f"-{level}", "-T0", raw.name, "-o", str(out)], check=True)


def write_conda(
    record: Record,
    files_root: Path,
    out_dir: Path,
    *,
    text_prefix_files: set[str] = frozenset(),
    link: dict | None = None,
    level: int = 3,
) -> Path:
    """Package everything under files_root as out_dir/<subdir>/<name>-<version>-<build>.conda."""
    target_dir = out_dir / record.subdir
    target_dir.mkdir(parents=True, exist_ok=True)
    index = {
        "name": record.name,
        "version": record.version,
        "build": record.build,
        "build_number": record.build_number,
        "depends": list(record.depends),
        "constrains": list(record.constrains),
        "subdir": record.subdir,
        "license": record.license,
        "timestamp": int(time.time() * 1000),
    }
    if record.subdir != "noarch":
        index.update(platform="linux", arch={"linux-64": "x86_64", "linux-aarch64": "aarch64"}[record.subdir])
    if record.noarch:
        index["noarch"] = record.noarch
    if record.track_features:
        index["track_features"] = " ".join(record.track_features)
    info: dict[str, bytes] = {
        "info/index.json": json.dumps(index, indent=2, sort_keys=True).encode(),
        "info/paths.json": json.dumps(_paths_json(files_root, set(text_prefix_files)), indent=2).encode(),
        "info/about.json": json.dumps({"summary": f"{record.name} stand-in of the faforge test conda world"}).encode(),
    }
    if record.run_exports:
        info["info/run_exports.json"] = json.dumps(record.run_exports, sort_keys=True).encode()
    if link:
        info["info/link.json"] = json.dumps(link, sort_keys=True).encode()
    stem = f"{record.name}-{record.version}-{record.build}"
    with tempfile.TemporaryDirectory(dir=target_dir, prefix=".pkg-") as scratch:
        scratch = Path(scratch)
        info_root = scratch / "info-root"
        for rel, data in info.items():
            (info_root / rel).parent.mkdir(parents=True, exist_ok=True)
            (info_root / rel).write_bytes(data)
        _zstd_tar(info_root, ["info", *sorted(info)], scratch / f"info-{stem}.tar.zst", level)
        members = sorted(p.relative_to(files_root).as_posix() for p in files_root.rglob("*"))
        _zstd_tar(files_root, members, scratch / f"pkg-{stem}.tar.zst", level)
        final = target_dir / record.filename
        with zipfile.ZipFile(scratch / "out.conda", "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
            zf.write(scratch / f"pkg-{stem}.tar.zst", f"pkg-{stem}.tar.zst")
            zf.write(scratch / f"info-{stem}.tar.zst", f"info-{stem}.tar.zst")
        os.replace(scratch / "out.conda", final)
    return final


def read_info(package: Path, member: str) -> bytes:
    """One file of a .conda's info tarball (tests read index.json, run_exports.json back)."""
    with zipfile.ZipFile(package) as zf:
        name = next(n for n in zf.namelist() if n.startswith("info-"))
        raw = subprocess.run(["zstd", "-q", "-d", "-c"], input=zf.read(name), capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return tar.extractfile(member).read()
