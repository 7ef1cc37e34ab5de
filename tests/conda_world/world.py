"""Generate the local conda world: file:// channels standing in for conda-forge (and the legacy
pytorch + nvidia channels), whose packages carry real, sourced metadata and real payloads.

    python -m tests.conda_world.world [--out DIR]     # prints every channel, its size and the time

The package list, each payload's origin and every way a stand-in differs from the real package
are in world.yaml beside this file; the metadata records are in tests/fixtures/real_packages.yaml
(each with its source). The world is cached under the test cache (tests/support/cache.py), keyed by
the hash of those inputs, so only the first run on a machine downloads and packs (a few GB).
"""

from __future__ import annotations

import argparse
import fcntl
import fnmatch
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from faforge.channel.local import index
from faforge.matrix.canonical import canonical_bytes
from tests.conda_world import payloads
from tests.conda_world.archive import Record, write_conda
from tests.support.cache import cache_dir
from tests.support.cuda_toolkit import cuda_home
from tests.support.debian_toolchains import ensure_unpacked
from tests.support.tiers import slow_work
from tests.support.torch_envs import find_python

HERE = Path(__file__).resolve().parent
SPEC = HERE / "world.yaml"
FIXTURE = HERE.parent / "fixtures" / "real_packages.yaml"
INPUTS = [
    SPEC,
    FIXTURE,
    HERE / "archive.py",
    HERE / "payloads.py",
    HERE / "world.py",
    *sorted((HERE / "activation").glob("*")),
    HERE.parent / "support" / "debian_toolchains.yaml",
]
VIRTUAL = "__"


@dataclass(frozen=True)
class World:
    root: Path
    channels: dict[str, Path]
    seconds: float
    size_bytes: int
    download_seconds: float | None = None  # of `seconds`, pip downloading the wheels (None: an older world's record)

    def url(self, channel: str) -> str:
        return self.channels[channel].as_uri()

    def rattler_env(self) -> dict[str, str]:
        """The environment of a rattler-build run against this world: rattler's package cache is the world's pkgs/,
        the one its test prefixes install through (world_cache.install_from_world), so each package is extracted once
        per machine; in ~/.cache/rattler a second copy took 8.6 GB."""
        return {"RATTLER_CACHE_DIR": str(self.root)}


def _match_name(spec: str) -> str:
    return spec.split()[0].split("[")[0]


def load_spec() -> dict:
    return yaml.safe_load(SPEC.read_text())


def _records(spec: dict) -> dict[tuple, dict]:
    """The fixture's sourced records, then world.yaml's derived ones (made-up build strings)."""
    records = [*yaml.safe_load(FIXTURE.read_text())["packages"], *spec.get("derived_records", ())]
    return {(r["channel"], r["subdir"], r["name"], str(r["version"]), str(r["build"])): r for r in records}


def _record(entry: dict, fixture: dict[tuple, dict], world_names: set[str]) -> Record:
    key = (entry["channel"], entry["subdir"], entry["name"], str(entry["version"]), str(entry["build"]))
    if key not in fixture:
        raise LookupError(
            f"world.yaml: {'/'.join(key)} has no record in {FIXTURE.name}; add the real, sourced record there first"
        )
    real = fixture[key]
    # A dependency stays when the world has a package of that name (or it is virtual); the rest of
    # the published list is what the world leaves out (world.yaml: `left_out`).
    published = [*(real.get("depends") or ()), *(real.get("depends_not_stood_in") or ())]
    dropped = set(entry.get("drop_depends", ()))
    depends = tuple(
        d
        for d in published
        if _match_name(d) not in dropped and (_match_name(d).startswith(VIRTUAL) or _match_name(d) in world_names)
    )
    return Record(
        name=real["name"],
        version=str(real["version"]),
        build=str(real["build"]),
        build_number=int(real.get("build_number", 0)),
        subdir=real["subdir"],
        depends=depends,
        constrains=tuple(real.get("constrains") or ()),
        noarch=real.get("noarch"),
        track_features=tuple(real.get("track_features") or ()),
        run_exports=real.get("run_exports") or {},
        license=str(real.get("license", "")),
    )


def inputs_digest() -> str:
    """The world's cache key: its inputs in their canonical form, so a comment or a reformat keeps a built world."""
    digest = hashlib.sha256()
    for path in INPUTS:
        digest.update(path.name.encode() + b"\0" + canonical_bytes(path, path.read_bytes()))
    return digest.hexdigest()[:16]


def download_wheels(spec: dict, wheels_root: Path, log) -> None:
    """pip download every wheel group once, with that group's Python (its platform tags), from PyPI:
    the only network use of the world."""
    for group, wanted in spec["wheels"].items():
        wheel_dir = wheels_root / group
        marker = wheel_dir / ".complete"
        want = json.dumps(wanted, sort_keys=True)
        if marker.is_file() and marker.read_text() == want:
            continue
        wheel_dir.mkdir(parents=True, exist_ok=True)
        command = [
            str(find_python(wanted["python"])),
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary",
            ":all:",
            "-d",
            str(wheel_dir),
            *(["--no-deps"] if not wanted.get("deps") else []),
            *wanted["requirements"],
        ]
        log("+ " + " ".join(command))
        subprocess.run(command, check=True)
        marker.write_text(want)


def _wheel(wheel_dir: Path, pattern: str) -> Path:
    found = sorted(p for p in wheel_dir.glob("*.whl") if fnmatch.fnmatch(p.name, pattern))
    if len(found) != 1:
        raise LookupError(f"world.yaml: wheel pattern {pattern!r} matches {[p.name for p in found]} in {wheel_dir}")
    return found[0]


def cuda_toolkit() -> Path:
    """The CUDA toolkit behind `nvcc` (tests/support/cuda_toolkit asks nvcc itself)."""
    return cuda_home()


def _python_prefix(version: str) -> Path:
    """Where this machine's CPython <version> is installed (a venv's base, not the venv)."""
    out = subprocess.run(
        [str(find_python(version)), "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def stage_payload(payload: dict, stage: Path, wheels_root: Path) -> payloads.Payload:
    kind = payload["kind"]
    wheel_dir = wheels_root / payload.get("group", "")
    if kind == "empty":
        return payloads.files(
            stage, {f"share/faforge-world/{stage.name}.txt": "metadata-only stand-in (tests/conda_world/world.yaml)\n"}
        )
    if kind == "cpython":
        return payloads.cpython(_python_prefix(payload["version"]), payload["version"], stage)
    if kind == "noarch_wheel":
        return payloads.noarch_python_wheel(_wheel(wheel_dir, payload["wheel"]), stage)
    if kind == "python_wheel":
        wheels = [_wheel(wheel_dir, pattern) for pattern in payload.get("wheels", [payload.get("wheel")])]
        return payloads.python_wheel(wheels, stage, payload["python"])
    if kind == "torch":
        return payloads.torch_wheel(_wheel(wheel_dir, payload["wheel"]), stage, payload["python"])
    if kind == "legacy_torch":
        staged = payloads.legacy_torch_wheel(_wheel(wheel_dir, payload["wheel"]), stage, payload["python"])
        for pattern, members in payload.get("extra_wheels", {}).items():
            payloads.wheel_members(_wheel(wheel_dir, pattern), stage, members)
        return staged
    if kind == "libtorch":
        staged = payloads.libtorch_wheel(_wheel(wheel_dir, payload["wheel"]), stage)
        for pattern, members in payload.get("extra_wheels", {}).items():
            payloads.wheel_members(_wheel(wheel_dir, pattern), stage, members)
        return staged
    if kind == "wheel_members":
        staged = payloads.Payload(stage)
        for pattern, members in payload["wheels"].items():
            payloads.wheel_members(_wheel(wheel_dir, pattern), stage, members)
        return staged
    if kind == "toolkit":
        return payloads.copy_tree(cuda_toolkit(), stage, payload["members"])
    if kind == "debian":
        staged = payloads.copy_tree(ensure_unpacked(payload["toolchain"]), stage, payload["members"])
        payloads.files(
            stage, {rel: (HERE / "activation" / src).read_text() for rel, src in payload.get("files", {}).items()}
        )
        payloads.symlinks(stage, payload.get("links", {}))
        return staged
    if kind == "remote_wheel_members":
        return payloads.remote_wheel_members(payload, stage)
    if kind == "symlinks":
        return payloads.symlinks(stage, payload["links"])
    if kind == "files":
        texts = {rel: (HERE / "activation" / src).read_text() for rel, src in payload["files"].items()}
        return payloads.files(stage, texts, executable=tuple(payload.get("executable", ())))
    raise ValueError(f"world.yaml: unknown payload kind {kind!r}")


def build_world(out: Path | None = None, *, log=print) -> World:
    """The world for the current inputs, generated once under a lock (pytest workers, a CI run and
    a developer's shell may ask for it at the same time)."""
    slow_work("the conda world (tests/conda_world/world.py)")
    spec = load_spec()
    key = inputs_digest()
    parent = out or cache_dir("conda-world")
    parent.mkdir(parents=True, exist_ok=True)
    with open(parent / f"world-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_world_locked(spec, parent / f"world-{key}", log)


def _build_world_locked(spec: dict, root: Path, log) -> World:
    done = root / ".complete"
    channels = {name: root / name for name in spec["channels"]}
    if done.is_file():
        info = json.loads(done.read_text())
        return World(root, channels, info["seconds"], info["size_bytes"], info.get("download_seconds"))
    started = time.monotonic()
    wheels_root = cache_dir("conda-world") / "wheels"
    download_wheels(spec, wheels_root, log)
    downloaded = time.monotonic() - started
    fixture = _records(spec)
    world_names = {entry["name"] for packages in spec["channels"].values() for entry in packages}
    shutil.rmtree(root, ignore_errors=True)
    for channel, entries in spec["channels"].items():
        for entry in entries:
            record = _record({**entry, "channel": channel}, fixture, world_names)
            with tempfile.TemporaryDirectory(prefix="faforge-world-") as scratch:
                stage = Path(scratch) / record.name
                stage.mkdir()
                payload = stage_payload(entry.get("payload") or {"kind": "empty"}, stage, wheels_root)
                path = write_conda(
                    record,
                    payload.root,
                    channels[channel],
                    text_prefix_files=payload.text_prefix_files,
                    link=payload.link,
                    level=int(spec.get("zstd_level", 3)),
                )
            log(f"  {channel}/{record.subdir}/{path.name} ({path.stat().st_size / 2**20:.1f} MiB)")

    for directory in channels.values():
        index(directory)
    size = sum(p.stat().st_size for p in root.rglob("*.conda"))
    seconds = time.monotonic() - started
    done.write_text(json.dumps({"seconds": seconds, "size_bytes": size, "download_seconds": downloaded}))
    # The downloaded wheels live on in the world's packages; kept, they took 5.4 GB for a rebuild of the world,
    # which happens only when its inputs change (download_wheels fetches them again, about a minute).
    shutil.rmtree(wheels_root, ignore_errors=True)
    return World(root, channels, seconds, size, downloaded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="parent folder of the world (default: the test cache)")
    args = parser.parse_args(argv)
    world = build_world(args.out)
    for name, path in world.channels.items():
        print(f"{name}: {path.as_uri()}")
    print(
        f"world: {world.size_bytes / 2**30:.2f} GiB of packages, built in {world.seconds:.0f} s "
        f"({world.download_seconds or 0:.0f} s of it downloading wheels), at {world.root}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
