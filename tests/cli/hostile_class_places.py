"""The placeholders of hostile_classes.yaml (the hostile classes): hostile .conda archives, hostile channels and
repodata, hostile interpreters for doctor, and a package whose gates all passed (so publish goes as far as
it can). Made once per session, under the `places` fixture's folder.

A .conda is a stored zip of metadata.json and two zstd tarballs, info-*.tar.zst and pkg-*.tar.zst
(https://docs.conda.io/projects/conda-build/en/stable/resources/package-spec.html); the archives here are
written member by member with tarfile, so they can hold what no builder writes. `zstd` compresses.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from faforge.channel.local import PackageSpec, assemble
from faforge.packagefile import sha256_of
from faforge.release.manifest import record
from faforge.release.package import read_package
from tests.abi.layout_fixtures import layout_places
from tests.cli.hostile_wheel_indexes import make_wheel_index

NAME, VERSION, BUILD = "flash-attn", "2.8.3.post2", "py311_torch2_14_cu130_cxx11abi1_h1234567_0"
KERNEL_BUILD = "cu130_sm80_90_philox64_h1234567_0"
INDEX = {
    "name": NAME,
    "version": VERSION,
    "build": BUILD,
    "build_number": 0,
    "subdir": "linux-64",
    "platform": "linux",
    "arch": "x86_64",
    "depends": ["python 3.11.*"],
    "license": "BSD-3-Clause",
    "timestamp": 1700000000000,
}
BOMB_BYTES = 1 << 30  # info/index.json inflates to 1 GiB: valid JSON, then whitespace


class _Padded(io.RawIOBase):
    """`head` followed by `size - len(head)` spaces, read lazily (the bomb never exists uncompressed)."""

    def __init__(self, head: bytes, size: int) -> None:
        self.head, self.left = head, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.left)
        chunk = self.head[:n] + b" " * max(0, n - len(self.head))
        self.head = self.head[n:]
        buffer[:n] = chunk
        self.left -= n
        return n


def _member(
    name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = ""
) -> tuple[tarfile.TarInfo, io.IOBase | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode, info.size = kind, link, 0o644, len(data) if kind == tarfile.REGTYPE else 0
    return info, io.BytesIO(data) if kind == tarfile.REGTYPE else None


def _zstd_tar(members: list, out: Path) -> None:
    with (
        out.open("wb") as sink,
        subprocess.Popen(["zstd", "-q", "-1", "-c"], stdin=subprocess.PIPE, stdout=sink) as zstd,
    ):
        with tarfile.open(fileobj=zstd.stdin, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for info, data in members:
                tar.addfile(info, data)
        zstd.stdin.close()
    if zstd.returncode:
        raise RuntimeError(f"zstd failed on {out}")


def write_conda(path: Path, index: dict | None = None, pkg: list | None = None, info: list | None = None) -> Path:
    """A .conda at `path` with this index.json (or these info members) and these payload members."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stem = path.name.removesuffix(".conda")
    info = info or [_member("info/index.json", json.dumps(index if index is not None else INDEX).encode())]
    pkg = pkg if pkg is not None else [_member("share/flash-attn-standin.txt", b"x\n")]
    scratch = path.parent / f".{stem}.parts"
    scratch.mkdir()
    _zstd_tar(info, scratch / "info.tar.zst")
    _zstd_tar(pkg, scratch / "pkg.tar.zst")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
        zf.write(scratch / "pkg.tar.zst", f"pkg-{stem}.tar.zst")
        zf.write(scratch / "info.tar.zst", f"info-{stem}.tar.zst")
    shutil.rmtree(scratch)
    return path


def hostile_archives(tmp: Path) -> dict[str, Path]:
    """kind -> a .conda in its own channel folder tmp/archives/KIND/ch/linux-64/ (index runs on that folder).

    Payload members that escape aim at tmp/escaped/KIND-*: a case asserts those never appear."""
    escaped = tmp / "escaped"
    escaped.mkdir()
    (escaped / "outside.txt").write_text("outside\n")
    up = "../" * 24 + str(escaped).lstrip("/")
    members = {
        "member-absolute": [_member(f"{escaped}/member-absolute", b"x")],
        "member-dotdot": [_member(f"{up}/member-dotdot", b"x")],
        "member-symlink": [
            _member("lib", kind=tarfile.SYMTYPE, link=str(escaped)),
            _member("lib/member-symlink", b"x"),
        ],
        "member-hardlink": [
            _member("lib/outside.txt", kind=tarfile.LNKTYPE, link=str(escaped / "outside.txt")),
            _member("lib/outside.txt", b"overwritten\n"),
        ],
        "member-duplicate": [
            _member("share/flash-attn-standin.txt", b"one\n"),
            _member("share/flash-attn-standin.txt", b"two\n"),
        ],
    }
    indexes = {
        "subdir-int": {**INDEX, "subdir": 5},
        "subdir-dotdot": {**INDEX, "subdir": f"../../escaped-{os.getpid()}"},
        "subdir-dot": {**INDEX, "subdir": "."},
        "subdir-other": {**INDEX, "subdir": "linux-aarch64"},
        "depends-string": {**INDEX, "depends": "x"},
        "no-name": {k: v for k, v in INDEX.items() if k != "name"},
        "name-dotdot": {**INDEX, "name": "../../x"},
    }
    filename = f"{NAME}-{VERSION}-{BUILD}.conda"
    found = {}
    for kind, pkg in members.items():
        found[kind] = write_conda(tmp / "archives" / kind / "ch" / "linux-64" / filename, pkg=pkg)
    for kind, index in indexes.items():
        found[kind] = write_conda(tmp / "archives" / kind / "ch" / "linux-64" / filename, index=index)
    head = json.dumps(INDEX).encode()
    bomb = tarfile.TarInfo("info/index.json")
    bomb.size, bomb.mode = BOMB_BYTES, 0o644
    found["bomb"] = write_conda(
        tmp / "archives" / "bomb" / "ch" / "linux-64" / filename, info=[(bomb, _Padded(head, BOMB_BYTES))]
    )
    return found


def passed_manifest(tmp: Path, packages: list[Path]) -> Path:
    """A manifest folder where every gate passed for each of these packages (those faforge can read):
    publish then goes past its gate check to what it does with the package itself."""
    manifest = tmp / "manifest-passed"
    manifest.mkdir()
    for package in packages:
        try:
            facts = read_package(package)
        except Exception:  # a hostile package faforge cannot read needs no manifest
            continue
        for gate in ("abi", "import", "gpu"):
            record(manifest, facts, gate, "passed", "hostile-input harness: recorded as passed so publish goes on")
    return manifest


CHANNEL_KINDS = (
    "deep",
    "nan",
    "bigint",
    "wrong-types",
    "no-sha256",
    "zero",
    "fifo",
    "sparse",
    "subdir-root",
    "subdir-outside",
)


def _repodata_body(kind: str) -> str | None:
    record_ = {
        "name": NAME,
        "version": VERSION,
        "build": BUILD,
        "build_number": 0,
        "depends": [],
        "subdir": "linux-64",
        "size": 1,
        "md5": "0" * 32,
    }
    conda = {"info": {"subdir": "linux-64"}, "packages": {}}
    if kind == "deep":
        return "[" * 100_000 + "]" * 100_000
    if kind == "nan":
        return json.dumps(
            {**conda, "packages.conda": {"a-1-0.conda": {**record_, "size": float("nan"), "timestamp": float("inf")}}}
        )
    if kind == "bigint":
        return (
            '{"info": {"subdir": "linux-64"}, "packages": {}, "packages.conda": {"a-1-0.conda": '
            '{"name": "a", "version": "1", "build": "0", "build_number": ' + "9" * 100_000 + "}}}"
        )
    if kind == "wrong-types":
        return json.dumps(
            {"info": 5, "packages": [], "packages.conda": {"a-1-0.conda": {"name": 5, "version": [], "depends": "x"}}}
        )
    if kind == "no-sha256":  # the kernel record split_package pins, with everything but its sha256
        return json.dumps(
            {
                **conda,
                "packages.conda": {
                    f"libflash-attn-kernels-{VERSION}-{KERNEL_BUILD}.conda": {
                        **record_,
                        "name": "libflash-attn-kernels",
                        "build": KERNEL_BUILD,
                    }
                },
            }
        )
    return None


def make_channel(kind: str, where: Path) -> Path:
    """where/ch, a channel whose linux-64/repodata.json (or linux-64 itself) is hostile in this way, with
    noarch/ a valid empty index; where/outside is the folder a symlinked subdir points at. A kind `wheels-KIND`
    is a hostile wheel index root instead (tests.cli.hostile_wheel_indexes)."""
    if kind.startswith("wheels-"):
        return make_wheel_index(kind.removeprefix("wheels-"), where)
    channel, outside = where / "ch", where / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    (channel / "noarch").mkdir(parents=True)
    (channel / "noarch" / "repodata.json").write_text(
        json.dumps({"info": {"subdir": "noarch"}, "packages": {}, "packages.conda": {}})
    )
    subdir = channel / "linux-64"
    if kind.startswith("subdir-"):
        subdir.symlink_to("/" if kind == "subdir-root" else outside)
        return channel
    subdir.mkdir()
    repodata = subdir / "repodata.json"
    body = _repodata_body(kind)
    if body is not None:
        repodata.write_text(body)
    elif kind == "zero":
        repodata.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(repodata)
    elif kind == "sparse":
        with repodata.open("wb") as f:
            f.truncate(2 << 30)
    else:
        raise ValueError(f"no such hostile channel: {kind}")
    return channel


# ---------------------------------------------------------------- doctor's probe: output caps, its lines, leftovers
# Interpreters that flood their output (the probe's read is capped), print marked lines the probe would not
# (missing keys, wrong types, deep nesting: exit 2), or start a process in a session of its own that must be
# gone when doctor returns (tests/doctor/test_probe_hostile.py asserts that; here: the contract).
PROBE_MARK = "@@faforge-probe@@"
PROBE_ENV = json.dumps(
    {
        "stage": "env",
        "python": {"executable": "/x/bin/python", "version": "3.12.0", "implementation": "cpython", "prefix": "/x"},
        "system": {"os": "Linux", "machine": "x86_64"},
    }
)


def _marked(*lines: str) -> str:
    return "\n".join(f"printf '%s\\n' '{PROBE_MARK}{line}'" for line in lines)


PROBE_BREAKERS = {
    "flood-stdout": "tr '\\0' x < /dev/zero",  # no newline, without end
    "flood-stderr": "tr '\\0' x < /dev/zero >&2",
    "flood-lines": "yes",
    "line-missing-keys": _marked('{"stage": "env"}'),
    "line-wrong-types": _marked('{"stage": "env", "python": 5, "system": []}'),
    "line-deep": _marked("[" * 100_000 + "]" * 100_000),
    "line-deep-value": _marked('{"stage": "env", "python": ' + "[" * 200 + "]" * 200 + "}"),
    "line-invalid-json": _marked('{"stage": "env", "python": '),
    "line-no-stage": _marked('{"python": {}}'),
    "line-unknown-stage": _marked('{"stage": "nope"}'),
    "line-twice": _marked(PROBE_ENV, PROBE_ENV),
    "line-torch-wrong": _marked(
        PROBE_ENV, '{"stage": "torch", "imported": "yes", "devices": [{"name": "x", "capability": [9]}]}'
    ),
    "line-import-wrong": _marked(PROBE_ENV, '{"stage": "torch", "imported": false}', '{"stage": "import", "ok": 1}'),
    "line-escapes": _marked(
        PROBE_ENV.replace("/x/bin/python", "/x/\\u001b[2J\\udcffbin/python"),
        '{"stage": "torch", "imported": false, "error": {"type": "E", "message": "\\u001b]0;owned\\u0007"}}',
    ),
    "setsid-exits": "setsid sh -c 'exec sleep 300' </dev/null >/dev/null 2>&1 &\nexit 1",
    "setsid-holds-stdout": "setsid sh -c 'exec sleep 300' &\nexit 1",
}


def hostile_interpreters(tmp: Path) -> dict[str, Path]:
    """kind -> a path given to `doctor --python`: scripts that misbehave, and paths that are no program."""
    folder = tmp / "interpreters"
    folder.mkdir()
    scripts = {
        "escapes": r"printf '\033[2J\033]0;owned\007{\"x\": \"\033[31m\"}\n'",
        "megabytes": "head -c 50000000 /dev/zero | tr '\\0' 'x'",
        "never-exits": "exec sleep 600",
        "exits-1": "echo 'something failed' >&2; exit 1",
        "invalid-json": "echo '{\"python\": '",
        "wrong-types": 'echo \'{"python": 5, "version": [1], "torch": "x", "site": 7, "packages": 3}\'',
        "closes-stdout": "exec >&-; sleep 0.2; exit 0",
        **PROBE_BREAKERS,
    }
    found = {}
    for kind, body in scripts.items():
        path = folder / kind
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
        found[kind] = path
    os.mkfifo(folder / "fifo")
    found["fifo"] = folder / "fifo"
    (folder / "a-directory").mkdir()
    found["a-directory"] = folder / "a-directory"
    not_executable = folder / "not-executable"
    shutil.copy(sys.executable, not_executable)
    not_executable.chmod(stat.S_IRUSR | stat.S_IWUSR)
    found["not-executable"] = not_executable
    return found


def other_build_venvs(tmp: Path) -> dict[str, Path]:
    """kind -> the python of a venv holding a broken or hostile other build of flash-attn 2's extension
    (variants/flash-attn-builds.yaml): random bytes as vllm-flash-attn's extension under a version that carries
    escape sequences, and aphrodite-flash-attn's package and .dist-info without its extension."""
    found = {}
    for kind, dist, version, files in (
        (
            "other-build-junk",
            "vllm_flash_attn",
            "2.6.2\x1b[2J\x1b]0;owned\x07",
            {"vllm_flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so": os.urandom(4096)},
        ),
        (
            "other-build-no-extension",
            "aphrodite_flash_attn",
            "2.6.1.post2",
            {"aphrodite_flash_attn/__init__.py": b"import aphrodite_flash_attn_2_cuda\n"},
        ),
    ):
        prefix = tmp / "other-builds" / kind
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=120)
        python = prefix / "bin" / "python"
        site = Path(
            subprocess.run(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        meta = site / f"{dist}-2.6.2.dist-info"
        meta.mkdir(parents=True)
        (meta / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\nVersion: {version}\nRequires-Dist: torch==2.4.0\n"
        )
        (meta / "INSTALLER").write_text("pip\n")
        for name, data in files.items():
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_bytes(data)
        found[kind] = python
    return found


def split_package(tmp: Path) -> Path:
    """A flash-attn that needs a kernel package: verify --kernel-channel then downloads it."""
    return assemble(
        PackageSpec(
            NAME,
            VERSION,
            BUILD,
            "linux-64",
            depends=("python 3.11.*", f"libflash-attn-kernels =={VERSION} {KERNEL_BUILD}"),
            files={"share/flash-attn-standin.txt": "x"},
        ),
        tmp / "split-pkg",
    )


def class_places(tmp: Path, conda: Path) -> dict[str, str]:
    archives = hostile_archives(tmp)
    split = split_package(tmp)
    places = {f"archive_{kind.replace('-', '_')}": str(path) for kind, path in archives.items()}
    places.update({f"archive_chan_{kind.replace('-', '_')}": str(path.parents[1]) for kind, path in archives.items()})
    places.update({f"python_{kind.replace('-', '_')}": str(path) for kind, path in hostile_interpreters(tmp).items()})
    places.update({f"python_{kind.replace('-', '_')}": str(path) for kind, path in other_build_venvs(tmp).items()})
    places.update(
        split_conda=str(split),
        escaped=str(tmp / "escaped"),
        manifest_passed=str(passed_manifest(tmp, [*archives.values(), split, conda])),
        python=sys.executable,
        split_sha256=sha256_of(split),
    )
    from tests.cli.hostile_publish_places import publish_places  # noqa: PLC0415 (it imports this module's constants)

    places.update(publish_places(tmp, conda))  # publishing and healing the wheel index
    places.update(layout_places(tmp))
    return places
